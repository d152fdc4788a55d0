"""training: the Keras-version policy of the fit adapter (pure), and what it does at run time."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_py
from tfdevices.mends.base import NOT_NEEDED
from tfdevices.mends.keras_fit import FIT_ADAPTER_KERAS, INSTALL, NOT_COVERED, decide_fit_adapter

LOW, HIGH = FIT_ADAPTER_KERAS


@pytest.mark.parametrize(
    "version, legacy, state",
    [
        ("3.3.3", False, INSTALL),  # the first release whose reduce_per_replica fails across workers
        ("3.4.1", False, INSTALL),  # TensorFlow 2.17's
        ("3.5.0", False, INSTALL),  # the first release with _maybe_symbolic_build
        ("3.8.0", False, INSTALL),
        ("3.15.1", False, INSTALL),
        ("3.15.2.dev2026", False, INSTALL),
        ("3.2.1", False, NOT_COVERED),  # "auto" sums the logs there: another code path, not checked
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
        from keras.src.backend.tensorflow.optimizer import TFOptimizer
        def functions():
            return (getattr(trainer.TensorFlowTrainer, "_maybe_symbolic_build", None), trainer.reduce_per_replica,
                    trainer.TensorFlowTrainer.train_step, TFOptimizer._distributed_tf_update_step,
                    trainer.TensorFlowTrainer.make_train_function)
        before = functions()
        first, second = training.install_fit_adapter(), training.install_fit_adapter()
        after = functions()
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


def test_covered_keras_gets_what_it_has_wrapped_once():
    """Features first: each function is wrapped where this Keras has it and it needs the mend, and only once."""
    proc = run_py("""
        import json
        from keras.src.backend.tensorflow import trainer
        from keras.src.backend.tensorflow.optimizer import TFOptimizer
        from keras.src.losses import loss as loss_module
        from keras.src.optimizers.base_optimizer import BaseOptimizer
        from tfdevices import training
        from tfdevices.mends import keras_fit
        owners = {"_maybe_symbolic_build": trainer.TensorFlowTrainer, "reduce_per_replica": trainer,
                  "_distributed_tf_update_step": TFOptimizer, "train_step": trainer.TensorFlowTrainer,
                  "make_train_function": trainer.TensorFlowTrainer,
                  "scale_loss": BaseOptimizer}
        originals = {name: owner.__dict__.get(name) for name, owner in owners.items()}
        expected = {
            "_maybe_symbolic_build": originals["_maybe_symbolic_build"] is not None,   # Keras 3.5+
            "reduce_per_replica": True,
            "_distributed_tf_update_step": keras_fit._sums_inside_merge_call(TFOptimizer),  # Keras 3.3-3.4
            "make_train_function": keras_fit._sums_inside_merge_call(TFOptimizer),
            "train_step": not hasattr(loss_module, "scale_loss_for_distribution"),    # Keras 3.3-3.7
            "scale_loss": not hasattr(loss_module, "scale_loss_for_distribution"),
        }
        result = training.install_fit_adapter()
        training.install_fit_adapter()
        wrapped = {name: getattr(owner.__dict__.get(name), "__wrapped__", None) is originals[name]
                   and originals[name] is not None for name, owner in owners.items()}
        keras_fit.MEND.undo()
        restored = all(owner.__dict__.get(name) is originals[name] for name, owner in owners.items())
        print(json.dumps({"state": result.state, "expected": expected, "wrapped": wrapped, "restored": restored}))
    """)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["state"] == "install"
    assert out["wrapped"] == out["expected"]  # wrapped once (not twice), where needed
    assert out["restored"]


class _SumsInside:  # Keras 3.3-3.4's shape: the sum is inside the merge call
    def _backend_update_step(self, grads, variables, learning_rate):
        pass

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        return self._all_reduce_sum_gradients(grads_and_vars)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return grads_and_vars


class _SumsBefore(_SumsInside):  # Keras 3.5's shape: summed before it
    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        return grads_and_vars


@pytest.mark.parametrize("optimizer_class, inside", [(_SumsInside, True), (_SumsBefore, False), (object, False)])
def test_the_gradient_sum_is_detected_by_the_code_that_does_it(optimizer_class, inside):
    from tfdevices.mends.keras_fit import _sums_inside_merge_call

    assert _sums_inside_merge_call(optimizer_class) is inside


def test_the_import_hook_inside_the_mends_own_check_mends_once():
    """TF_USE_LEGACY_KERAS=1: TensorFlow imports no Keras 3; the mend's check imports it, firing the hook inside."""
    proc = run_py(
        """
        import json
        from tfdevices.mends import keras_fit
        keras_fit.install_when_imported()      # what a launched worker does at start-up
        keras_fit.install_fit_adapter()        # what build_strategy does: its check imports Keras' trainer
        from keras.src.backend.tensorflow import trainer
        inner = trainer.reduce_per_replica.__wrapped__
        print(json.dumps({"state": keras_fit.MEND.status().state, "twice": hasattr(inner, "__wrapped__")}))
        """,
        env={"TF_USE_LEGACY_KERAS": "1"},
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"state": "applied", "twice": False}  # twice: a 1 / replicas loss scale applied twice (3.3-3.7)
