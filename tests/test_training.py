"""training: the Keras-version policy of the fit adapter (pure), and what it does at run time."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_py
from tfdevices.training import FIT_ADAPTER_KERAS, INSTALL, NOT_COVERED, NOT_NEEDED, decide_fit_adapter

LOW, HIGH = FIT_ADAPTER_KERAS


@pytest.mark.parametrize(
    "version, legacy, state",
    [
        ("3.5.0", False, INSTALL),  # the first release with _maybe_symbolic_build
        ("3.8.0", False, INSTALL),
        ("3.15.1", False, INSTALL),
        ("3.15.2.dev2026", False, INSTALL),
        ("3.4.1", False, NOT_COVERED),  # fit fails there too, by other code
        ("3.0.5", False, NOT_COVERED),
        ("3.16.0", False, NOT_COVERED),  # not checked: left as Keras made it, and said so
        ("4.0.0", False, NOT_COVERED),
        ("2.15.0", False, NOT_COVERED),
        ("unknown", False, NOT_COVERED),
        ("3.\u0661\u0665.0", False, NOT_COVERED),  # Arabic-Indic digits are not a release number
        ("", False, NOT_COVERED),
        ("3.15.1", True, NOT_NEEDED),  # tf_keras' fit works
    ],
)
def test_decide_fit_adapter(version, legacy, state):
    decision = decide_fit_adapter(version, legacy=legacy)
    assert decision.state == state
    assert decision.fit_works == (state != NOT_COVERED)
    if state == NOT_COVERED:  # a clear message: what, which releases are covered, what to do
        assert "keras-team/keras#20585" in decision.reason
        assert f"{LOW[0]}.{LOW[1]} to {HIGH[0]}.{HIGH[1] - 1}" in decision.reason
        assert "HINT: train with tfdevices.training.train" in decision.reason


def test_a_long_version_is_shortened_in_the_message():
    assert len(decide_fit_adapter("9." * 5000).reason) < 1000


def test_uncovered_keras_is_left_alone_with_one_warning():
    """A Keras the adapter does not know: Keras' own functions stay, one warning says so, check_fit_supported raises."""
    proc = run_py("""
        import json, logging
        import keras
        from keras.src.backend.tensorflow import trainer
        import keras.src.version               # pretend: a release the adapter was not checked against
        keras.src.version.__version__ = "3.99.0"  # (Keras' own source of the version, set before `import keras` ends)
        records = []
        handler = type("H", (logging.Handler,), {"emit": lambda s, r: records.append(r.getMessage())})
        logging.getLogger("tfdevices").addHandler(handler())
        from tfdevices import training
        before = (trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica)
        first, second = training.install_fit_adapter(), training.install_fit_adapter()
        after = (trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica)
        import tensorflow as tf
        class Fake:  # what build_strategy returns, as far as check_fit_supported looks
            kind = "multi_worker"
        try:
            training.check_fit_supported(Fake())
            error = None
        except training.StrategyError as err:
            error = str(err)
        print(json.dumps({"state": first.state, "same": first is second, "untouched": before == after,
                          "warnings": records, "error": error}))
    """)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (out["state"], out["same"], out["untouched"]) == ("not_covered", True, True)
    assert len(out["warnings"]) == 1 and "Keras 3.99.0 is not a release" in out["warnings"][0]
    assert out["error"].startswith("Keras 3 model.fit fails under MultiWorkerMirroredStrategy")
    assert "HINT: train with tfdevices.training.train" in out["error"]


def test_covered_keras_gets_both_functions_wrapped_once():
    proc = run_py("""
        import json
        from keras.src.backend.tensorflow import trainer
        from tfdevices import training
        originals = (trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica)
        result = training.install_fit_adapter()
        training.install_fit_adapter()
        mended = (trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica)
        print(json.dumps({"state": result.state, "wrapped": [m.__wrapped__ is o for m, o in zip(mended, originals)]}))
    """)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"state": "install", "wrapped": [True, True]}  # wrapped once, not twice
