from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfdevices import SpecError, TfDevicesError
from tfdevices.gpus.spec import DeviceSpec, parse_spec


@pytest.mark.parametrize("spec, expected", [
    ("all", DeviceSpec("all")),
    (" ALL ", DeviceSpec("all")),
    ("none", DeviceSpec("none")),
    ("cpu", DeviceSpec("none")),
    ("CPU", DeviceSpec("none")),
    ("auto:1", DeviceSpec("auto", count=1)),
    ("auto:12", DeviceSpec("auto", count=12)),
    ("Auto: 2", DeviceSpec("auto", count=2)),
    ("0", DeviceSpec("explicit", keys=("0",))),
    (0, DeviceSpec("explicit", keys=("0",))),
    (3, DeviceSpec("explicit", keys=("3",))),
    ("0,2", DeviceSpec("explicit", keys=("0", "2"))),
    (" 2 , 0 ", DeviceSpec("explicit", keys=("2", "0"))),
    ([0, 2], DeviceSpec("explicit", keys=("0", "2"))),
    (("0", 2), DeviceSpec("explicit", keys=("0", "2"))),
    ("0-3", DeviceSpec("explicit", keys=("0", "1", "2", "3"))),
    ("5,0-1", DeviceSpec("explicit", keys=("5", "0", "1"))),
    ("0:1", DeviceSpec("explicit", keys=("0:1",))),
    ("0:0,1", DeviceSpec("explicit", keys=("0:0", "1"))),
    ("GPU-8a3c", DeviceSpec("explicit", keys=("GPU-8a3c",))),
    ("MIG-4f1e-77", DeviceSpec("explicit", keys=("MIG-4f1e-77",))),
    ("07", DeviceSpec("explicit", keys=("7",))),
])
def test_good_specs(spec, expected):
    assert parse_spec(spec) == expected


def test_int_and_string_mean_the_same():
    for i in range(4):
        assert parse_spec(i) == parse_spec(str(i)) == parse_spec([i])


@pytest.mark.parametrize("spec, first_words", [
    ("", "GPU spec '': an empty spec is ambiguous"),
    ("   ", "GPU spec '   ': an empty spec is ambiguous"),
    ("auto", "GPU spec 'auto': 'auto' needs a count"),
    ("auto:0", "GPU spec 'auto:0': the count after"),
    ("auto:-1", "GPU spec 'auto:-1': the count after"),
    ("auto:two", "GPU spec 'auto:two': the count after"),
    ("auto:1.5", "GPU spec 'auto:1.5': the count after"),
    ("-1", "GPU spec '-1': '-1' is not a GPU index"),
    (-1, "GPU spec -1: '-1' is not a GPU index"),
    ("0,-2", "GPU spec '0,-2': '-2' is not a GPU index"),
    ("0,,1", "GPU spec '0,,1': empty item"),
    ("0,", "GPU spec '0,': empty item"),
    ("0,0", "GPU spec '0,0': GPU 0 named more than once"),
    ("0-2,1", "GPU spec '0-2,1': GPU 1 named more than once"),
    ("3-1", "GPU spec '3-1': range '3-1' runs backwards"),
    ("GPU:1", "GPU spec 'GPU:1': 'GPU:1' is a TensorFlow logical name"),
    ("/gpu:0", "GPU spec '/gpu:0': '/gpu:0' is a TensorFlow logical name"),
    ("/device:GPU:0", "GPU spec '/device:GPU:0': '/device:GPU:0' is a TensorFlow"),
    ("cpu:0", "GPU spec 'cpu:0': 'cpu:0' is a TensorFlow logical name"),
    ("1.5", "GPU spec '1.5': '1.5' is not a GPU index"),
    ("one", "GPU spec 'one': 'one' is not a GPU index"),
    ("all,0", "GPU spec 'all,0': 'all' is not a GPU index"),
    ("none,1", "GPU spec 'none,1': 'none' is not a GPU index"),
    ("0;1", "GPU spec '0;1': '0;1' is not a GPU index"),
    ("0 1", "GPU spec '0 1': '0 1' is not a GPU index"),
    (True, "GPU spec True: expected a string"),
    (None, "GPU spec None: expected a string"),
    (1.0, "GPU spec 1.0: expected a string"),
    ([], "GPU spec []: an empty list is ambiguous"),
    ([0, True], "GPU spec [0, True]: item True is not a GPU index"),
    ([0, 0], "GPU spec [0, 0]: GPU 0 named more than once"),
    ({"gpus": 1}, "GPU spec {'gpus': 1}: expected a string"),
])
def test_bad_specs(spec, first_words):
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    assert str(err.value).startswith(first_words)
    assert "HINT:" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_error_names_the_input_by_its_flag():
    with pytest.raises(SpecError, match=r"^--gpus 'auto'"):
        parse_spec("auto", what="--gpus")


def test_text_is_canonical_and_reparses():
    for spec in ["all", "cpu", "auto:3", " 2, 0 ", "0-2", [1, "3"], "0:1,2", "GPU-ab12"]:
        parsed = parse_spec(spec)
        assert parse_spec(parsed.text) == parsed


@settings(max_examples=400, deadline=None)
@given(st.one_of(
    st.text(max_size=12),
    st.text(alphabet="0123456789,:-autoAUTOnecpilGPUMI /", max_size=12),
    st.integers(min_value=-5, max_value=10**6),
    st.lists(st.one_of(st.integers(-3, 20), st.text(max_size=4), st.booleans(), st.none()), max_size=4),
))
def test_random_specs_raise_only_our_errors(spec):
    try:
        parsed = parse_spec(spec)
    except TfDevicesError as err:
        assert isinstance(err, SpecError) and "HINT:" in str(err)
    else:
        assert parsed.kind in ("all", "none", "auto", "explicit")
        assert parse_spec(parsed.text) == parsed
