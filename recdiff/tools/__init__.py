"""Tools built on the library, apart from its rooms (model, cache, checkpoint, samplers, engine, benchmarks, study):

- ``python -m recdiff.tools.train``: the embedded model's training recipe (``conf/train/``), reading its data
  through :mod:`~recdiff.tools.train_data`
- ``python -m recdiff.tools.evaluate_embedded``: an embedded model's model-card tables
- ``python -m recdiff.tools.soak``: a sweep of N workers under a seeded fault schedule (kills, pauses, database
  restarts, an interrupt), then the exactly-once verdict (:mod:`~recdiff.tools.soak`)
- ``python -m recdiff.tools.sampler_docs``: docs/samplers.md and the names table of docs/architecture.md, from the
  samplers' parameter declarations (``recdiff/params.py``)
- :mod:`~recdiff.tools.paper` (run as ``python -m analysis paper``): every recipe of ``sweeps/`` swept in a
  subprocess, then their analysis (:mod:`analysis.paper`)
- :mod:`~recdiff.tools.speed` (run as ``python -m recdiff.bench``): tokens/s of every sampler, paired against the
  reference, the step profile, and the bounds of :mod:`~recdiff.tools.bounds` (bandwidth, weight products)
- :mod:`~recdiff.tools.speed_authors` (run as ``python -m recdiff.bench_authors``): recdiff against the authors'
  reference implementation, which runs in a subprocess (:mod:`~recdiff.tools._authors_worker`)

The two speed benches keep their documented ``python -m recdiff.bench`` / ``recdiff.bench_authors`` commands through
a forward module of that name at the package root; their code is here.
"""
