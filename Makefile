# Two commands set up and run everything on a fresh machine with Python 3.11+ (README, "Quick start"):
#   make sweep    the main job on the embedded default (creates .venv on first use)
#   make test     ruff, then the test suite, as CI runs it (.ci/run), with its 25 slowest tests
#   make test-fast  the suite without its slow tier (model, samplers, config, study logic), while working
# The environment is .venv, built from constraints.txt (the exact versions CI tests) once, and again when
# constraints.txt or pyproject.toml change. TORCH_INDEX=https://download.pytorch.org/whl/cpu takes torch's CPU build
# from PyTorch's index (PyPI's Linux torch is the CUDA build, several GB); PYTHON picks the interpreter.

PYTHON ?= python3
TORCH_INDEX ?=
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH := $(shell sed -n 's/^torch==//p' constraints.txt)

.PHONY: sweep test test-fast paper dashboard report figure env clean-env

sweep: $(STAMP)
	$(PY) sweep.py -m sampler.r_inner=1,2,4,8

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest --durations=25

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow" --durations=10

paper: $(STAMP)
	$(PY) -m analysis paper --scale ci

report: $(STAMP)
	$(PY) -m analysis report embedded-compose

# The README's figure (docs/img/README.md): the main job in a fresh study, so every trial of it is measured by this
# run (none reused from outputs/optuna), then the study's Pareto figure copied to docs/img/.
FIGURE_RUN := outputs/figure
figure: $(STAMP)
	rm -rf $(FIGURE_RUN)
	$(PY) sweep.py -m sampler.r_inner=1,2,4,8 study.storage=$(FIGURE_RUN)/journal.log \
	    study.artifact_dir=$(FIGURE_RUN)/artifacts hydra.sweep.dir=$(FIGURE_RUN)/sweep
	$(PY) -m analysis report $(FIGURE_RUN)/journal.log -o $(FIGURE_RUN)/report --formats png
	cp $(FIGURE_RUN)/report/pareto.png docs/img/main_job_pareto.png

dashboard: $(STAMP)
	$(VENV)/bin/optuna-dashboard outputs/optuna/journal.log --artifact-dir outputs/optuna/artifacts

env: $(STAMP)

# torch first, from the index asked for: a bare "torch" requirement resolved by pip would pull the CUDA build
$(STAMP): constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check torch==$(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[dev,lm-eval]"
	touch $(STAMP)

clean-env:
	rm -rf $(VENV)
