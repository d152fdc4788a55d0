"""How a mend decides: what it finds first (the defect, by looking), the version second (only said).

The contract (:mod:`tfdevices.mends.base`) on a mend made here; the probes of Keras' trainer
(:mod:`tfdevices.mends.keras_trainer`) on Keras-shaped functions with and without each defect, and
on the Keras installed; ``fit_end``'s reading of where ``fit`` calls ``on_train_end``.
"""

from __future__ import annotations

import json
import logging

import pytest

from tests.helpers import run_py
from tfdevices.mends.base import (
    APPLIED,
    NOT_NEEDED,
    SKIPPED,
    WOULD_APPLY,
    Checked,
    Finding,
    Mend,
    MendState,
    NotApplicableError,
    Replaced,
    needed,
    not_needed,
    unknown,
)
from tfdevices.mends.fit_end import ends_outside_finally

CHECKED = Checked("Thing", (1, 2), (1, 5))


class Toy(Mend):
    """A mend whose finding, release and change are set by the test."""

    name = "toy"
    changes = "nothing real"
    why = "a test"
    detects = "what the test says"
    hint = "do the thing by hand."
    checked = CHECKED

    def __init__(self, finding: Finding, version: str | None, fails: bool = False) -> None:
        super().__init__()
        self.finding, self.version, self.fails, self.changed = finding, version, fails, 0

    def _check(self) -> Finding:
        return self.finding

    def _version(self) -> str | None:
        return self.version

    def _apply(self) -> str:
        if self.fails:
            raise NotApplicableError("what it changes is gone")
        self.changed += 1
        return "changed it"


@pytest.mark.parametrize(
    "finding, version, state, detail",
    [
        (needed("the defect is here"), "1.4.0", APPLIED, "changed it"),
        (
            needed("the defect is here"),
            "1.9.0.dev1",
            APPLIED,
            (
                "Thing 1.9.0.dev1: not checked against this release (checked: 1.2 to 1.4); the defect is here; "
                "mended: changed it"
            ),
        ),
        (not_needed("the defect is gone"), "1.4.0", NOT_NEEDED, "the defect is gone"),
        (
            not_needed("the defect is gone"),
            "2.0",
            NOT_NEEDED,
            "Thing 2.0: not checked against this release (checked: 1.2 to 1.4); the defect is gone",
        ),
        (unknown("it cannot tell", "do this."), "1.3", SKIPPED, "it cannot tell HINT: do this."),
        (needed("no Thing at all"), None, APPLIED, "changed it"),  # no release in use: nothing to say of it
    ],
)
def test_the_finding_decides_and_the_version_is_only_said(finding, version, state, detail, caplog) -> None:
    mend = Toy(finding, version)
    preview = mend.preview()
    assert preview.state == {APPLIED: WOULD_APPLY}.get(state, state) and mend.changed == 0  # a preview changes nothing
    with caplog.at_level(logging.INFO, logger="tfdevices"):
        first, second = mend.apply(), mend.apply()
    assert (first.state, first.detail) == (state, detail) and second == first
    assert mend.changed == (1 if state == APPLIED else 0)  # once, however often applied
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == (1 if state == SKIPPED else 0)  # what to do is said once


def test_a_change_that_finds_its_target_gone_is_skipped_with_the_mends_hint(caplog) -> None:
    mend = Toy(needed("the defect is here"), "1.3", fails=True)
    with caplog.at_level(logging.WARNING, logger="tfdevices"):
        status = mend.apply()
        mend.apply()
    assert (status.state, status.detail) == (SKIPPED, "what it changes is gone HINT: do the thing by hand.")
    assert [r.getMessage() for r in caplog.records] == ["tfdevices: mend toy changed nothing: " + status.detail]


def test_states_are_an_enum_that_reads_as_its_word() -> None:
    assert isinstance(APPLIED, MendState) and APPLIED == "applied" and f"{APPLIED}" == "applied"
    assert json.dumps({"state": NOT_NEEDED}) == '{"state": "not_needed"}'
    assert [s.value for s in MendState] == [
        "applied",
        "not_needed",
        "skipped",
        "off",
        "not_reached",
        "undone",
        "would_apply",
    ]


def test_a_replacement_is_restored_only_where_it_is_still_there() -> None:
    class Base:
        def f(self) -> str:
            return "base"

    class Owner(Base):
        def g(self) -> str:
            return "own"

    own, inherited = Replaced.of(Owner, "g", lambda self: "ours"), Replaced.of(Owner, "f", lambda self: "ours")
    own.put()
    inherited.put()
    assert (Owner().g(), Owner().f()) == ("ours", "ours")
    inherited.restore()
    assert Owner().f() == "base" and "f" not in vars(Owner)  # inherited: taken away again, not copied in
    later = Replaced.of(Owner, "g", lambda self: "later")  # a later wrapper keeps its own
    later.put()
    own.restore()
    assert Owner().g() == "later"
    later.restore()
    assert Owner().g() == "ours"  # the later one put back what it found


# --------------------------------------------------------------------------- fit_end: the code path


def _ends_plainly(callbacks):
    callbacks.on_train_begin()
    callbacks.on_train_end()


def _ends_in_finally(callbacks):
    try:
        callbacks.on_train_begin()
    finally:
        callbacks.on_train_end()


def _never_ends(callbacks):
    callbacks.on_train_begin()


@pytest.mark.parametrize(
    "fit, defect", [(_ends_plainly, True), (_ends_in_finally, False), (_never_ends, False), (len, None)]
)
def test_fit_end_reads_where_fit_calls_on_train_end(fit, defect) -> None:
    assert ends_outside_finally(fit) is defect


# --------------------------------------------------------------------------- the probes of Keras' trainer

_PROBES = """
import json
import tensorflow as tf
from tensorflow.python.eager import context
from keras.src.backend.tensorflow import trainer
from tfdevices.mends import keras_trainer as kt

def mean(axis):
    def reduce_per_replica(values, strategy, reduction):
        if trainer._collective_all_reduce_multi_worker(strategy):
            return {k: strategy.reduce("MEAN", v, axis=axis) for k, v in values.items()}
        return values
    return reduce_per_replica

def broken(values, strategy, reduction):
    raise TypeError("a new signature")

class Whole:  # Keras 3.5-3.15's shape: the first batch reduced whole
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        for _, _, it in iterator:
            data_batch = self.distribute_strategy.reduce("MEAN", next(it), axis=None)
            break
        self._symbolic_build(data_batch=data_batch)

class OneReplica:  # a fixed shape: the batch as it comes, no reduce
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        for _, _, it in iterator:
            data_batch = next(it)
            break
        self._symbolic_build(data_batch=data_batch)

class NoBuild:  # Keras 3.3-3.4: no such function
    pass

logs = {name: kt.logs_reduced_along_axis_0(type("M", (), {"reduce_per_replica": staticmethod(f)}), tf)
        for name, f in (("axis 0", mean(0)), ("axis None", mean(None)), ("raises", broken))}
logs["missing"] = kt.logs_reduced_along_axis_0(object(), tf)
logs["installed"] = kt.logs_reduced_along_axis_0(trainer, tf)
batch = {c.__name__: kt.first_batch_reduced_whole(c, tf) for c in (Whole, OneReplica, NoBuild)}
cls = kt.trainer_class(trainer)
batch["installed"] = kt.first_batch_reduced_whole(cls, tf)
print(json.dumps({"logs": logs, "batch": batch, "started": context.context()._context_handle is not None,
                  "version": kt.keras_version(), "build": hasattr(cls, "_maybe_symbolic_build")}))
"""


def test_the_probes_find_each_defect_where_it_is_and_start_no_tensorflow() -> None:
    out = json.loads(run_py(_PROBES).stdout.strip().splitlines()[-1])
    assert out["logs"] == {"axis 0": True, "axis None": False, "raises": None, "missing": None, "installed": True}
    assert out["batch"] == {"Whole": True, "OneReplica": False, "NoBuild": False, "installed": out["build"]}
    assert out["started"] is False  # no runtime: the probes ran Keras' code on a strategy that runs nothing
