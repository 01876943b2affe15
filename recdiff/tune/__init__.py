"""``python -m recdiff.tune``: the fastest sampler settings for this machine, model and batch size, at no accuracy
cost, of the diffusion sampler or LoopSpec (docs/tune.md). The pieces, one job each:

- :mod:`~recdiff.tune.plan`: the command line: the sweep's typed plan (Hydra's compose API) and ``tune.*``; the two
  samplers' knobs and their Optuna distributions
- :mod:`~recdiff.tune.tuning`: the studies, the reference on the searched slice, the constrained search
- :mod:`~recdiff.tune.design`: the search's first proposals: the paper's defaults, LoopSpec's, then one-knob moves
  around the best
- :mod:`~recdiff.tune.budget`: the time budget (the search keeps the confirmation's time)
- :mod:`~recdiff.tune.choice`: feasibility, the knee (ties towards the paper's defaults), the verdict, the table
- :mod:`~recdiff.tune.confirm`: the held-out measurements beside the defaults (the paper's, LoopSpec's) and the
  reference
- :mod:`~recdiff.tune.provenance`: the preset's provenance (where and how it was tuned)

The preset file, written (never replacing one without ``tune.overwrite``) and read (``recdiff.load_preset``,
:class:`PresetWarning`), is :mod:`recdiff.presets`, whose reading half is re-exported here; the rest needs torch and
Optuna.
"""

from recdiff.presets import PresetWarning, load_preset, read_preset

__all__ = ["PresetWarning", "load_preset", "read_preset"]
