"""Fixtures shared by the tests.

TensorFlow's runtime is configured once per process. Every in-process test that
uses TensorFlow asks for ``tf4``: TensorFlow with the host CPU split into four
logical devices ``/CPU:0`` .. ``/CPU:3``. A test that needs another layout runs
in a subprocess (``tests.helpers.run_py``).

Under ``CI=true`` a skipped test fails unless its reason begins with a kind the suite allows
(``platform:``, ``hardware:``, ``leg:``; :mod:`tests.skip_rule`).
"""

from __future__ import annotations

import os

import pytest

from tests.skip_rule import pytest_runtest_makereport  # noqa: F401 (the hook: under CI=true a skip of no allowed kind fails)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

LOGICAL_CPUS = 4


@pytest.fixture(scope="session")
def tf4():
    """TensorFlow, with the CPU split into 4 logical devices for this test process."""
    import tensorflow as tf

    import tfdevices

    try:
        # no GPU, even on a machine that has one: the tests are about logical CPUs
        tfdevices.configure(tfdevices.select("none", tfdevices.Inventory()), virtual_devices=LOGICAL_CPUS)
    except tfdevices.RuntimeInitializedError:
        pass  # the assertion below says whether the layout is right
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(names) == LOGICAL_CPUS, (
        f"expected {LOGICAL_CPUS} logical CPUs, got {names}: a test used TensorFlow without the tf4 fixture"
    )
    return tf


def pytest_collection_modifyitems(items):
    """A test that uses TensorFlow through ``tf4`` (itself or a fixture built on it) is marked ``tensorflow``.

    ``make test-no-tf`` leaves those out where TensorFlow is not installed; every other leg runs them.
    A test that imports TensorFlow in a fresh process is marked by hand.
    """
    for item in items:
        if "tf4" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.tensorflow)
