"""Static autoregressive decoding: every token gets exactly r recurrences (with an exit gate's ``exit_threshold``,
each is read out at its exit recurrence, as the Ouro reference's ``exit_threshold`` reads out)."""

from __future__ import annotations

from recdiff.samplers.ar import ARBatch

make_batch = ARBatch  # its parameters: recdiff.params.StaticParams
