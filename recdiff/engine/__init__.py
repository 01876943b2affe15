"""The batched engine: a scheduler (which sequence runs in which slot) and a model runner (one fixed-shape,
optionally compiled step over all slots). Samplers state their algorithms once, for a batch of slots."""
