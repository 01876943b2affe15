"""Tools built on the library, apart from its rooms (model, cache, load, samplers, engine, benchmarks, study):

- ``python -m recdiff.tools.train``: the embedded model's training recipe (``conf/train/``), reading its data
  through :mod:`~recdiff.tools.train_data`
- ``python -m recdiff.tools.evaluate_embedded``: an embedded model's model-card tables
- ``python -m recdiff.tools.sampler_docs``: docs/samplers.md and the names table of docs/architecture.md, from the
  samplers' parameter declarations (``recdiff/params.py``)
"""
