# `make demo` and `make test` set up .venv on first use, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CUDA build of TensorFlow only where an NVIDIA driver is present.
TF_PKG := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 'tensorflow[and-cuda]>=2.16' || echo 'tensorflow>=2.16')
PYTEST_WORKERS ?= 2

.PHONY: demo test bench setup clean

$(STAMP): setup.cfg setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet '$(TF_PKG)' -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tfdevices list
	$(VENV)/bin/tfdevices demo mirrored

test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
