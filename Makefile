# Two entry points for a fresh machine (each creates the virtual environment if missing):
#   make walkthrough   set up, then run the main job
#   make test          set up, type-check workbench/, then run every test (notebooks included)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup walkthrough test bench clean evidence

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and exactly: the pinned CPU build installs in seconds
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,executorch,browser,dask,hf]'
	touch $(STAMP)

setup: $(STAMP)

walkthrough: $(STAMP)
	$(PY) -m workbench walkthrough --out out/walkthrough

test: $(STAMP)
	$(PY) -m mypy
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/propagate_scale.py

clean:
	rm -rf $(VENV) out .pytest_cache

# the shipped model's fits and held-out predictions, made again after a change to the
# decode code or the tables (regime_model() reads the file while its inputs are unchanged)
evidence: $(STAMP)
	$(PY) -c "from workbench.speed.regime_model import fitted_regime_model, regime_evidence; from workbench.speed.evidence_file import write_evidence_file; print(write_evidence_file(regime_evidence(fitted_regime_model())))"
