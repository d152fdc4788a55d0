"""The one typed loader for records read from JSON (tfdevices/core/json_records.py)."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from tests.helpers import run_py
from tfdevices.core.errors import InputError, InventoryFileError
from tfdevices.core.json_records import MAX_DEPTH, Check, Rules, kind, load
from tfdevices.core.record_class import record


@record
class Leaf:
    n: int
    label: str | None = None
    json_rules = Rules(entry="a leaf", hint="write {'n': 1}.", checks={"n": Check(low=0, high=100)})


@record
class Tree:
    name: str
    ratio: float = 0.5
    flag: bool | None = None
    pair: tuple[int, int] | None = None
    leaves: tuple[Leaf, ...] = ()
    names: list[str] | None = None
    table: dict[str, int] | None = None
    kind: str = "a"
    json_rules = Rules(
        entry="a tree",
        hint="see the example.",
        prefix="tree field ",
        error=InventoryFileError,
        checks={
            "ratio": Check(low=0, high=1),
            "leaves": Check(max_items=3, noun="leaf"),
            "kind": Check(choices=("a", "b"), noun="kinds"),
        },
    )


@dataclasses.dataclass(frozen=True)
class Plain:
    a: int
    b: tuple[str, ...] = ()
    c: Leaf | None = None


@record
class Chain:
    depth: int
    next: Chain | None = None


GOOD = {
    "name": "t",
    "ratio": 1,
    "flag": False,
    "pair": [8, 0],
    "leaves": [{"n": 1}, {"n": 2, "label": "x"}],
    "names": ["p", "q"],
    "table": {"k": 3},
    "kind": "b",
}


def test_a_record_and_a_dataclass_load_by_their_annotations():
    tree = load(Tree, GOOD, where="f.json")
    assert tree == Tree("t", 1, False, (8, 0), (Leaf(1), Leaf(2, "x")), ["p", "q"], {"k": 3}, "b")
    assert load(Plain, {"a": 1, "b": ["x"], "c": {"n": 3}}, where="p") == Plain(1, ("x",), Leaf(3))
    assert load(Tree, {"name": "only"}, where="f") == Tree("only")  # every other field has its default


@pytest.mark.parametrize(
    "change, words",
    [
        ({"name": 3}, "f.json: tree field name=3 must be a string of at most 4,096 characters; it is a whole number."),
        ({"ratio": 2}, "f.json: tree field ratio=2 must be a number from 0 to 1; it is out of range."),
        ({"ratio": math.nan}, "f.json: tree field ratio=nan must be a number from 0 to 1; it is not a finite number."),
        ({"ratio": True}, "tree field ratio=True must be a number from 0 to 1; it is a boolean."),
        ({"flag": "yes"}, "tree field flag='yes' must be true or false or null; it is a string."),
        (
            {"pair": [1, 2, 3]},
            "tree field pair=[1, 2, 3] must be a list of 2 (a whole number, a whole number); it holds 3.",
        ),
        ({"pair": [1, "2"]}, "tree field pair[1]='2' must be a whole number; it is a string."),
        ({"leaves": [{"n": 1}] * 4}, "f.json: tree field leaves: 4 leaf entries; at most 3 are read."),
        (
            {"leaves": [{"n": 101}]},
            "leaves[0]: n=101 must be a whole number from 0 to 100; it is out of range. HINT: write",
        ),
        ({"leaves": [[1]]}, "tree field leaves[0]: expected a JSON object for a leaf, not a list."),
        ({"leaves": [{"n": 1, "m": 2}]}, "tree field leaves[0]: unknown field(s) ['m']; known fields: ['label', 'n']."),
        ({"leaves": [{}]}, "tree field leaves[0]: lacks 'n'; required fields: ['n']."),
        ({"table": {"k": "v"}}, "tree field table['k']='v' must be a whole number; it is a string."),
        ({"table": []}, "tree field table=[] must be an object of at most 4,096 entries or null; it is a list."),
        ({"kind": "c"}, "tree field kind='c'; known kinds: a, b."),
        ({"names": ["x" * 5000]}, "tree field names[0]='xxx"),
        ({"names": ["\ud800"]}, "tree field names[0]='\\ud800' holds a lone surrogate"),
        (
            {"colour": 1},
            "f.json: unknown tree field(s) ['colour']; known fields: ['flag', 'kind', 'leaves', 'name', 'names', ",
        ),
    ],
)
def test_each_error_names_the_path_the_value_what_it_must_be_and_the_fix(change, words):
    with pytest.raises(InputError) as err:
        load(Tree, {**GOOD, **change}, where="f.json")
    text = str(err.value)
    assert words in text, text
    assert text.startswith("f.json: ") and "HINT: " in text and "\n" not in text and len(text) < 600


def test_the_class_names_its_error_and_its_hint():
    with pytest.raises(InventoryFileError, match=r"HINT: see the example\.$"):
        load(Tree, [], where="f")
    with pytest.raises(InputError, match=r"^f: expected a JSON object for a tree, not a list\."):
        load(Tree, [], where="f")
    with pytest.raises(InputError, match=r"^f: lacks 'name'; required fields: \['name'\]\."):
        load(Tree, {}, where="f")


def test_nesting_is_bounded():
    data: dict = {"depth": 0}
    for i in range(MAX_DEPTH + 5):
        data = {"depth": i + 1, "next": data}
    with pytest.raises(InputError, match=f"nested deeper than {MAX_DEPTH}"):
        load(Chain, data, where="c")
    shallow = {"depth": 1, "next": {"depth": 0}}
    assert load(Chain, shallow, where="c") == Chain(1, Chain(0))


def test_a_field_of_a_type_it_cannot_read_is_a_type_error_at_first_load():
    @record
    class Odd:
        x: set[int]

    with pytest.raises(TypeError, match=r"cannot read fields of type set\[\.\.\.\]"):
        load(Odd, {"x": []}, where="o")


def test_a_field_reader_is_given_the_fields_before_it():
    seen = []

    @record
    class Sized:
        n: int
        items: tuple[int, ...]
        json_rules = Rules(
            checks={"items": Check(parse=lambda v, what, values: seen.append((what, values["n"])) or tuple(v))}
        )

    assert load(Sized, {"n": 2, "items": [1, 2]}, where="s") == Sized(2, (1, 2))
    assert seen == [("s: items", 2)]


def test_kind_names_json_kinds():
    assert [kind(v) for v in (None, False, 0, 0.5, "", [], {})] == [
        "null",
        "a boolean",
        "a whole number",
        "a number",
        "a string",
        "a list",
        "an object",
    ]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=6), children, max_size=5),
    max_leaves=25,
)
_FIELDS = list(GOOD)


def _check_result(data: object) -> None:
    try:
        tree = load(Tree, data, where="fuzz.json")
    except InputError as err:
        text = str(err)
        assert text.startswith("fuzz.json: ") and "HINT: " in text  # a Leaf's error is its own (InputError)
        assert "\n" not in text and len(text) < 1000, text
    else:  # what loads has the annotated types, within the checks, and can be written back
        assert isinstance(tree.name, str) and 0 <= tree.ratio <= 1 and not isinstance(tree.ratio, bool)
        assert tree.pair is None or (len(tree.pair) == 2 and all(type(p) is int for p in tree.pair))
        assert all(type(leaf) is Leaf and 0 <= leaf.n <= 100 for leaf in tree.leaves) and len(tree.leaves) <= 3
        assert tree.kind in ("a", "b") and (tree.flag is None or type(tree.flag) is bool)
        json.dumps({"name": tree.name, "names": tree.names, "table": tree.table}).encode("utf-8")


@settings(max_examples=400, deadline=None)
@given(st.one_of(_JSON, st.dictionaries(st.sampled_from(_FIELDS + ["x"]), _JSON, max_size=8)))
def test_fuzz_any_json_value_loads_or_is_a_one_line_error(data):
    _check_result(data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_FIELDS), _JSON)
def test_fuzz_one_field_of_a_good_record_changed(field, value):
    _check_result({**GOOD, field: value})


def test_seeded_mutations_of_a_good_record():  # without hypothesis's shrinking: many cheap cases, same seed each run
    rng = random.Random(54)
    values = [None, True, 0, -1, 10**30, 0.5, math.inf, "", "b", "\udfff", [], [1, 2], [{"n": 1}] * 5, {}, {"n": 1}]
    for _ in range(3000):
        data = dict(GOOD)
        for _ in range(rng.randint(1, 3)):
            data[rng.choice(_FIELDS)] = rng.choice(values)
        _check_result(data)


def test_reading_a_saved_listing_imports_neither_dataclasses_nor_typing():
    out = run_py("""
        import sys
        from tfdevices.cli import main
        main(["list", "--inventory", "tests/data/topo-dgx-a100-nvswitch.json"])
        print(sorted(m for m in ("dataclasses", "typing", "inspect", "ast") if m in sys.modules))
    """).stdout
    assert out.strip().splitlines()[-1] == "[]", out


def test_the_docstring_examples():
    import doctest

    from tfdevices.core import json_records

    result = doctest.testmod(json_records)
    assert result.attempted > 0 and result.failed == 0
