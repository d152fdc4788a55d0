"""Frozen records: what the GPU listing path uses instead of dataclasses."""

from __future__ import annotations

import pytest

from tests.helpers import run_py
from tfdevices.core.record_class import FrozenRecordError, asdict, defaults, fields, is_record, record, replace


@record
class Inner:
    a: int
    b: str = "x"


@record
class Outer:
    name: str
    inner: Inner
    more: tuple[Inner, ...] = ()
    table: dict | None = None


def test_construction_by_position_keyword_and_default():
    assert Inner(1) == Inner(a=1) == Inner(1, "x") and Inner(1, b="y").b == "y"
    assert repr(Inner(1)) == "Inner(a=1, b='x')"
    assert fields(Inner) == ("a", "b") == fields(Inner(1))


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: Inner(), "missing required argument 'a'"),
        (lambda: Inner(1, "y", 3), "takes 2 arguments but 3 were given"),
        (lambda: Inner(1, c=2), "unexpected keyword argument 'c'"),
        (lambda: Inner(1, a=2), "multiple values for argument 'a'"),
    ],
)
def test_bad_construction_is_a_type_error(call, words):
    with pytest.raises(TypeError, match=words):
        call()


def test_frozen():
    one = Inner(1)
    with pytest.raises(FrozenRecordError, match="cannot assign to field 'a' of a frozen Inner"):
        one.a = 2
    with pytest.raises(AttributeError, match="cannot delete field 'b'"):
        del one.b
    assert one.a == 1


def test_equal_by_value_and_type_and_hashable():
    assert Inner(1) != Inner(2) and Inner(1) != (1, "x")
    assert len({Inner(1), Inner(1), Inner(2)}) == 2


def test_replace_and_asdict_go_into_nested_records():
    outer = Outer("o", Inner(1), (Inner(2), Inner(3, "z")), {"k": Inner(4)})
    assert replace(outer, name="p") == Outer("p", Inner(1), (Inner(2), Inner(3, "z")), {"k": Inner(4)})
    assert asdict(outer) == {
        "name": "o",
        "inner": {"a": 1, "b": "x"},
        "more": ({"a": 2, "b": "x"}, {"a": 3, "b": "z"}),
        "table": {"k": {"a": 4, "b": "x"}},
    }
    assert is_record(outer) and is_record(Outer) and not is_record(object())
    with pytest.raises(TypeError, match="unexpected keyword argument 'nope'"):
        replace(outer, nope=1)


def test_a_required_field_after_a_default_is_refused():
    with pytest.raises(TypeError, match="field 'b' without a default follows 'a'"):

        @record
        class Bad:
            a: int = 0
            b: int


def test_listing_gpus_imports_neither_dataclasses_nor_typing():
    # what keeps 'tfdevices list' near a bare NVML call (benchmarks/bench_discovery.py measures it)
    out = run_py("""
        import sys
        from tfdevices.cli import main
        main(["list"])
        print(sorted(m for m in ("dataclasses", "typing", "inspect", "ast") if m in sys.modules))
    """).stdout
    assert out.strip().splitlines()[-1] == "[]", out


def test_defaults_are_the_fields_that_have_one():
    assert defaults(Inner) == {"b": "x"} == defaults(Inner(1))
    assert defaults(Outer) == {"more": (), "table": None}
