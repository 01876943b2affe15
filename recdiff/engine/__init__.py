"""The batched engine: a scheduler (which sequence runs in which slot) and a model runner (one fixed-shape,
optionally compiled step over all slots: ``runner.py``, with its pieces, compiled programs, graphs and per-model pool
in modules of their own). Samplers state their algorithms once, for a batch of slots, and hold every policy."""
