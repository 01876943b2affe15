"""Adaptive-compute autoregressive decoding: each token exits its recurrence once the latent change
‖s_k − s_{k−1}‖/‖s_k‖ (mean over the positions of the call) falls below ε, after at most r steps; with an exit gate's
``exit_threshold`` q, once its cumulative exit probability reaches q (its later recurrences are not computed; the
K/V later tokens read at those depths: the shared cache's last recurrence, or none under ``per_step``)."""

from __future__ import annotations

from recdiff.samplers.ar import ARBatch

make_batch = ARBatch  # its parameters: recdiff.params.AdaptiveParams
