# `make demo` and `make test` set up .venv on first use, then run.
# The suite lists its 25 slowest tests (--durations): where CI's minutes go.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CUDA build of TensorFlow only where an NVIDIA driver is present.
TF_PKG := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 'tensorflow[and-cuda]>=2.16' || echo 'tensorflow>=2.16')
PYTEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q --durations=25
# Tests whose results depend on the kernels TensorFlow runs: oneDNN (on by default on
# AVX-512 CPUs) rewrites MatMul into _MklMatMul, Dense layers into _MklNativeFusedMatMul.
KERNEL_TESTS := tests/test_verify.py tests/verify/test_profiles.py tests/verify/test_xla_profiles.py tests/tensorboard tests/layers/test_place.py tests/test_readme.py tests/test_notebooks.py tests/decide/test_advise_capture.py

.PHONY: demo test test-oldest test-nightly test-tf-keras test-no-tf lint docs bench setup clean

$(STAMP): setup.cfg setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet '$(TF_PKG)' -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tfdevices list
	$(VENV)/bin/tfdevices demo mirrored

# The whole suite runs with oneDNN set one way (ONEDNN_SUITE), the kernel-dependent tests again
# with it set the other way (ONEDNN_KERNELS): both settings, whatever this CPU's default.
ONEDNN_SUITE ?= TF_ENABLE_ONEDNN_OPTS=0
ONEDNN_KERNELS ?= TF_ENABLE_ONEDNN_OPTS=1

# lint first (seconds), then the tests; the notebooks the tests ran go into the API pages with their outputs
EXECUTED := build/notebooks
test: lint
	rm -rf $(EXECUTED)
	$(PY) $(LEG_LINE) newest
	$(ONEDNN_SUITE) TFDEVICES_EXECUTED_NOTEBOOKS=$(CURDIR)/$(EXECUTED) $(PYTEST)
	$(ONEDNN_KERNELS) $(PYTEST) $(KERNEL_TESTS)
	$(MAKE) docs NOTEBOOKS=$(EXECUTED)

# One line naming the TensorFlow and Keras a leg of the tests ran (tf.keras: tf_keras under TF_USE_LEGACY_KERAS=1).
LEG_LINE = -c "import sys, tensorflow as tf, keras; k = tf.keras; \
print(f'ci leg: {sys.argv[1]}: tensorflow {tf.__version__}, keras {keras.__version__}, tf.keras {k.__name__.split(\".\")[0]} {getattr(k, \"__version__\", None) or __import__(\"tf_keras\").__version__}')"

# The oldest TensorFlow the README names, with the Keras its users pinned (TF 2.16 came with 3.0-3.3),
# in a venv of its own built from PyPI; oneDNN as the main suite has it.
OLDEST_VENV := build/venv-oldest
OLDEST_PY := $(OLDEST_VENV)/bin/python
OLDEST_PINS := '$(subst >=2.16,==2.16.2,$(TF_PKG))' keras==3.3.3 tf-keras==2.16.0
# What the older TensorFlow changes: its internals (the quiet import, the runtime), the mends, strategies,
# capture and its profiles, PlacementLogger, layer placement, Keras on one and on many workers.
OLDEST_TESTS := tests/core/test_tf.py tests/mends tests/test_runtime.py tests/test_strategy.py tests/test_scopes.py \
	tests/test_training.py tests/test_multiworker.py tests/test_keras_flavours.py tests/test_verify.py tests/verify \
	tests/tensorboard/test_callbacks.py tests/layers/test_place.py tests/decide/test_advise_capture.py

$(OLDEST_VENV)/.installed: setup.cfg setup.py Makefile
	test -x $(OLDEST_PY) || $(PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_PY) -m pip install --quiet --upgrade pip
	$(OLDEST_PY) -m pip install --quiet $(OLDEST_PINS) 'pytest>=7,<9' 'pytest-xdist>=3' 'pytest-timeout>=2' 'hypothesis>=6' -e .
	touch $@

# Known on TensorFlow 2.16 only (the README's support table): a fresh process's first capture may leave some
# kernels tied to no executor step (its trace has no thread-pool links). capture() of a function that has not run
# yet takes their devices from its warm-up's run metadata; of one that ran before, from the one step of the call
# not done when they started, else they are reported on device '?' (under load: 1 process in 22; 8 in 12 without
# the done-callback rule). These
# two capture functions that ran before and need every kernel placed, and the third names the ops a retrace
# moved (a kernel on '?' moved nowhere: it failed 1 CI run in 4 of this leg): not run there; they run on the newest.
OLDEST_KNOWN := \
	--deselect tests/test_verify.py::test_the_first_capture_of_a_fresh_process_puts_every_kernel_on_its_device \
	--deselect tests/decide/test_advise_capture.py::test_a_chain_over_two_devices_leaves_each_idle_while_the_other_works \
	--deselect tests/tensorboard/test_callbacks.py::test_a_retrace_at_step_50_is_reported_with_the_ops_that_moved
test-oldest: $(OLDEST_VENV)/.installed
	$(OLDEST_PY) $(LEG_LINE) oldest
	$(ONEDNN_SUITE) $(OLDEST_PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q $(OLDEST_KNOWN) $(OLDEST_TESTS)

# tf_keras (Keras 2) through tf.keras, as its users have it: what they call, on the newest TensorFlow.
TF_KERAS_TESTS := tests/test_keras_flavours.py tests/tensorboard/test_callbacks.py tests/mends/test_uneven_batch.py
test-tf-keras: $(STAMP)
	TF_USE_LEGACY_KERAS=1 $(PY) $(LEG_LINE) tf_keras
	TF_USE_LEGACY_KERAS=1 $(ONEDNN_SUITE) $(PYTEST) $(TF_KERAS_TESTS)

# Tomorrow's TensorFlow and Keras before users get them: the newest nightlies the package registry served
# (`pip index versions --pre tf-nightly`, keras-nightly, tf-keras-nightly), pinned by date. A pin is moved on
# purpose, in a commit of its own.
TF_NIGHTLY := 2.23.0.dev20261026
KERAS_NIGHTLY := 3.16.0.dev2026102704
TF_KERAS_NIGHTLY := 2.23.0.dev2026102618
# In a venv of its own built from the registry; oneDNN as the main suite has it. The tests: the oldest leg's
# (TensorFlow's internals, the mends and their detection, strategies, capture and its profiles, PlacementLogger,
# layer placement, Keras 3 and tf_keras on one and on many workers) and doctor's (its lines in environments
# built from this venv: without Keras 3, without any Keras, without TensorFlow).
NIGHTLY_VENV := build/venv-nightly
NIGHTLY_PY := $(NIGHTLY_VENV)/bin/python
NIGHTLY_PINS := '$(subst >=2.16,==$(TF_NIGHTLY),$(subst tensorflow,tf-nightly,$(TF_PKG)))' \
	keras-nightly==$(KERAS_NIGHTLY) tf-keras-nightly==$(TF_KERAS_NIGHTLY)
NIGHTLY_TESTS := $(OLDEST_TESTS) tests/test_doctor.py

$(NIGHTLY_VENV)/.installed: setup.cfg setup.py Makefile
	test -x $(NIGHTLY_PY) || $(PYTHON) -m venv $(NIGHTLY_VENV)
	$(NIGHTLY_PY) -m pip install --quiet --upgrade pip
	$(NIGHTLY_PY) -m pip install --quiet $(NIGHTLY_PINS) 'pytest>=7,<9' 'pytest-xdist>=3' 'pytest-timeout>=2' \
		'hypothesis>=6' -e .
	touch $@
test-nightly: $(NIGHTLY_VENV)/.installed
	$(NIGHTLY_PY) $(LEG_LINE) nightly
	$(ONEDNN_SUITE) $(NIGHTLY_PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -q $(NIGHTLY_KNOWN) $(NIGHTLY_TESTS)

# Reading without TensorFlow (architecture, rule 9), as on a laptop or a TensorBoard-only host: `pip install .` alone
# (tensorboard, protobuf, absl-py, nvidia-ml-py) and the test tools, no TensorFlow, no Keras, in a venv of its own;
# the tests that read profiles (the project's XSpace schema, real TF and H200 XLA profiles), `tfdevices placement`,
# and the Placement tab through a real TensorBoard server (and Chromium where CI has it). Tests that need TensorFlow
# (marked `tensorflow`: by hand, or by tests/conftest.py for those using the tf4 fixture) are left out here only.
# The venv's tfdevices is the installed copy's: pytest runs from a copy of tests/ outside the working tree.
NO_TF_VENV := build/venv-no-tf
NO_TF_PY := $(NO_TF_VENV)/bin/python
NO_TF_TESTS := tests/verify/test_schema.py tests/verify/test_xla_profiles.py tests/verify/test_profiles.py \
	tests/verify/test_gpu_time.py tests/verify/test_transfers.py tests/verify/test_host_walk.py \
	tests/tensorboard/test_without_tf.py tests/tensorboard/test_plugin.py \
	tests/tensorboard/test_views.py tests/tensorboard/test_trace.py

$(NO_TF_VENV)/.installed: setup.cfg setup.py Makefile $(shell find tfdevices -name '*.py')
	test -x $(NO_TF_PY) || $(PYTHON) -m venv $(NO_TF_VENV)
	$(NO_TF_PY) -m pip install --quiet --upgrade pip
	$(NO_TF_PY) -m pip install --quiet 'pytest>=7,<9' 'pytest-xdist>=3' 'pytest-timeout>=2' 'hypothesis>=6' .
	touch $@
test-no-tf: $(NO_TF_VENV)/.installed
	$(NO_TF_PY) -c "import importlib.util as u, google.protobuf as p, tensorboard as t; \
	assert u.find_spec('tensorflow') is None and u.find_spec('keras') is None, 'TensorFlow or Keras is installed'; \
	print(f'ci leg: no_tf: no tensorflow, no keras; tensorboard {t.__version__}, protobuf {p.__version__}')"
	rm -rf build/no-tf-run && mkdir -p build/no-tf-run && cp -r tests setup.cfg build/no-tf-run/
	cd build/no-tf-run && TFDEVICES_TEST_ARTIFACTS=$(CURDIR)/build/test-artifacts ../../$(NO_TF_PY) -m pytest \
		-n $(PYTEST_WORKERS) --dist loadgroup -q -p no:cacheprovider -m "not tensorflow" $(NO_TF_TESTS)

# ruff (rules and format: .ci/ruff.toml) and mypy (setup.cfg: strict for core/, gpus/, jobs/, layers/)
LINTED := tfdevices tests benchmarks docs
lint: $(STAMP)
	$(VENV)/bin/ruff check --config .ci/ruff.toml $(LINTED)
	$(VENV)/bin/ruff format --check --config .ci/ruff.toml $(LINTED)
	$(VENV)/bin/mypy

# The documentation site in build/docs (Sphinx, furo, warnings are errors): the index, the README, the guides
# (docs/guides), the reference (one page per stage: the public names only), every command's --help, the notebooks
# with their outputs. Sources: docs/ (conf.py, index.rst, prepare.py, guides/), laid out in build/docs-src.
# NOTEBOOKS: a folder of already executed notebooks (make test passes the ones its tests ran);
# without it the notebooks are executed here.
NOTEBOOKS ?=
docs: $(STAMP)
	rm -rf build/docs-src build/docs
	$(PY) docs/prepare.py build/docs-src $(if $(NOTEBOOKS),--executed $(NOTEBOOKS))
	$(PY) -m sphinx -W --keep-going -q -b html -c docs build/docs-src build/docs
	@echo "docs: build/docs/index.html"

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
