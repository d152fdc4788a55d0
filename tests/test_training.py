"""training: the Keras-version policy of the fit adapter (pure), and what it does at run time."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_py
from tfdevices.mends.base import Found
from tfdevices.mends.keras_fit import CHECKED, KERAS3_FIT_HINT, fit_finding


@pytest.mark.parametrize(
    "defects, found, words",
    [
        (["reduce_per_replica asks for a mean along axis 0"], Found.NEEDED, "keras-team/keras#20585 is present"),
        ([], Found.NOT_NEEDED, "the defect keras-team/keras#20585 is gone from Keras 3.99.0"),
        (None, Found.UNKNOWN, "cannot be told"),
    ],
)
def test_the_defect_decides_not_the_version(defects, found, words):
    finding = fit_finding("3.99.0", defects)
    assert finding.found is found and words in finding.why
    assert finding.hint == (KERAS3_FIT_HINT if found is Found.UNKNOWN else "")


@pytest.mark.parametrize(
    "version, covered",
    [
        ("3.3.3", True),  # the first release whose reduce_per_replica fails across workers
        ("3.4.1", True),  # TensorFlow 2.17's
        ("3.5.0", True),  # the first release with _maybe_symbolic_build
        ("3.15.1", True),
        ("3.15.2.dev2026", True),
        ("3.16.0.dev2026102704", False),  # the nightly CI pins: mended where the defect is found, said unchecked
        ("3.2.1", False),  # "auto" sums the logs there: another code path, not checked
        ("4.0.0", False),
        ("unknown", False),
        ("3.\u0661\u0665.0", False),  # Arabic-Indic digits are not a release number
        ("", False),
    ],
)
def test_the_version_only_says_whether_it_was_checked(version, covered):
    note = CHECKED.note(version)
    assert CHECKED.covers(version) is covered and (note == "") is covered
    if not covered:
        assert "not checked against this release (checked: 3.3 to 3.15)" in note


def test_a_long_version_is_shortened_in_the_message():
    assert len(CHECKED.note("9." * 5000)) < 200 and len(fit_finding("9." * 5000, []).why) < 1000


_PRETEND = """
    import json, logging
    import keras
    from keras.src.backend.tensorflow import trainer
    import keras.src.version               # pretend: a release the adapter was not checked against
    keras.src.version.__version__ = "3.99.0"
    records = []
    handler = type("H", (logging.Handler,), {"emit": lambda s, r: records.append(r.getMessage())})
    logging.getLogger("tfdevices").addHandler(handler())
    logging.getLogger("tfdevices").setLevel(logging.INFO)
    from tfdevices import training
    from tfdevices.mends.keras_trainer import trainer_class
    cls = trainer_class(trainer)
    CHANGE
    def functions():
        return (getattr(cls, "_maybe_symbolic_build", None), trainer.reduce_per_replica, cls.train_step)
    before = functions()
    first, second = training.install_fit_adapter(), training.install_fit_adapter()
    after = functions()
    class Fake:  # what build_strategy returns, as far as check_fit_supported looks
        kind = "multi_worker"
    try:
        training.check_fit_supported(Fake())
        error = None
    except training.StrategyError as err:
        error = str(err)
    print(json.dumps({"state": first.state, "reason": first.reason, "same": first == second,
                      "untouched": before == after, "messages": records, "error": error}))
"""


def _pretend(change: str) -> dict:
    proc = run_py(_PRETEND.replace("CHANGE", change))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_unchecked_keras_with_the_defect_is_mended_and_said_so():
    """Keras 3.99.0 (pretended) with Keras' own trainer: the defect is there, mended; the status says unchecked."""
    out = _pretend("pass")
    assert (out["state"], out["same"], out["untouched"], out["error"]) == ("install", True, False, None)
    assert out["reason"].startswith("Keras 3.99.0: not checked against this release (checked: 3.3 to 3.15); ")
    assert "keras-team/keras#20585 is present: reduce_per_replica asks for a mean along axis 0" in out["reason"]
    assert "; mended: " in out["reason"] and len(out["messages"]) == 1  # said once, at INFO


def test_a_keras_whose_defect_is_gone_is_left_alone_and_said_so():
    """Keras' functions replaced by fixed ones (a mean with axis=None, the first batch not reduced): not mended."""
    out = _pretend(
        """
    from keras.src import tree
    def fixed_reduce(values, strategy, reduction):
        return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
    def fixed_build(self, iterator=None, data_batch=None):
        return None
    trainer.reduce_per_replica, cls._maybe_symbolic_build = fixed_reduce, fixed_build"""
    )
    assert (out["state"], out["untouched"], out["error"], out["messages"]) == ("not_needed", True, None, [])
    assert "the defect keras-team/keras#20585 is gone from Keras 3.99.0" in out["reason"]
    assert out["reason"].startswith("Keras 3.99.0: not checked against this release")


def test_a_keras_the_mend_cannot_read_is_left_alone_with_one_warning():
    """Keras' trainer without the function the probe runs: it cannot tell, leaves fit alone, says what to do once."""
    out = _pretend("del trainer._collective_all_reduce_multi_worker")
    assert (out["state"], out["same"], out["untouched"]) == ("not_covered", True, True)
    assert len(out["messages"]) == 1 and "cannot be told" in out["messages"][0]
    assert "HINT: train with tfdevices.training.train" in out["messages"][0]
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
        from tfdevices.mends.keras_trainer import trainer_class
        cls = trainer_class(trainer)
        owners = {"_maybe_symbolic_build": cls, "reduce_per_replica": trainer,
                  "_distributed_tf_update_step": TFOptimizer, "train_step": cls,
                  "make_train_function": cls,
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
