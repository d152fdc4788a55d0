from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from tests.helpers import peak_allocation
from tfdevices import SpecError, TfDevicesError
from tfdevices.gpus.spec import DeviceSpec, parse_spec


@pytest.mark.parametrize(
    "spec, expected",
    [
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
    ],
)
def test_good_specs(spec, expected):
    assert parse_spec(spec) == expected


def test_int_and_string_mean_the_same():
    for i in range(4):
        assert parse_spec(i) == parse_spec(str(i)) == parse_spec([i])


@pytest.mark.parametrize(
    "spec, first_words",
    [
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
    ],
)
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
@given(
    st.one_of(
        st.text(max_size=12),
        st.text(alphabet="0123456789,:-autoAUTOnecpilGPUMI /", max_size=12),
        st.integers(min_value=-5, max_value=10**6),
        st.lists(st.one_of(st.integers(-3, 20), st.text(max_size=4), st.booleans(), st.none()), max_size=4),
    )
)
def test_random_specs_raise_only_our_errors(spec):
    try:
        parsed = parse_spec(spec)
    except TfDevicesError as err:
        assert isinstance(err, SpecError) and "HINT:" in str(err)
    else:
        assert parsed.kind in ("all", "none", "auto", "explicit")
        assert parse_spec(parsed.text) == parsed


# ---------------------------------------------------------------- hostile input: digits and sizes

from tfdevices.gpus.spec import MAX_GPUS  # noqa: E402


@pytest.mark.parametrize(
    "spec, first_words",
    [
        ("\u0663", "GPU spec '\u0663': '\u0663' is not a GPU index"),  # Arabic-Indic 3: CUDA would not read it
        ("0,\uff11", "GPU spec '0,\uff11': '\uff11' is not a GPU index"),  # fullwidth 1
        ("\u00b2", "GPU spec '\u00b2': '\u00b2' is not a GPU index"),  # superscript 2
        ("auto:\u0663", "GPU spec 'auto:\u0663': the count after 'auto:' must be"),
        ("0:\u0661", "GPU spec '0:\u0661': '0:\u0661' is not a GPU index"),
        ("0-100000000", "GPU spec '0-100000000': '100000000' is not a GPU index (a machine has at most 1024"),
        ("0-1024", "GPU spec '0-1024': '1024' is not a GPU index"),
        ("auto:1025", "GPU spec 'auto:1025': the count after 'auto:' must be a whole number from 1 to 1024"),
        pytest.param("auto:" + "9" * 5000, "GPU spec 'auto:9999", id="auto-long"),
        pytest.param("9" * 5000, "GPU spec '9999", id="long-index"),
        (5000, "GPU spec 5000: '5000' is not a GPU index (a machine has at most 1024 GPUs)"),
        pytest.param(10**5000, "GPU spec <int of 16610 bits>: it is not a GPU index", id="huge-int"),
        pytest.param([0, 10**5000], "GPU spec <a list too long to show>: item <int of 16610 bits>", id="huge-int-item"),
        pytest.param([0] * 2000, "GPU spec [0, 0, 0", id="long-list"),
        pytest.param(",".join(map(str, range(1000))) + ",0-100", "GPU spec '0,1,2", id="too-many"),
    ],
)
def test_hostile_specs(spec, first_words):
    with pytest.raises(SpecError) as err:
        parse_spec(spec)
    text = str(err.value)
    assert text.startswith(first_words)
    assert "HINT:" in text and "\n" not in text
    assert len(text) < 400  # long inputs are shortened in the message


def test_largest_spec_is_accepted():
    assert len(parse_spec(f"0-{MAX_GPUS - 1}").keys) == MAX_GPUS
    assert parse_spec(f"auto:{MAX_GPUS}").count == MAX_GPUS


def test_duplicates_are_found_in_a_long_spec():
    keys = ",".join(str(i) for i in range(MAX_GPUS)) + ",5"
    with pytest.raises(SpecError, match="GPU 5 named more than once"):
        parse_spec(keys[: keys.rindex(",")].replace(",1023", ",5"))


_SPEC_ALPHABET = "0123456789,:-\u0663\uff11\u00b2 autoAUTOnecpilGPUMIab/\ud800"


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(alphabet=_SPEC_ALPHABET, max_size=40),
        st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 10**12), st.integers(0, 10**12)),
        st.builds(lambda n: f"auto:{n}", st.integers(-10, 10**30)),
        st.integers(-(10**30), 10**30),
        st.lists(st.one_of(st.integers(-3, 10**9), st.text(alphabet=_SPEC_ALPHABET, max_size=12)), max_size=50),
    )
)
def test_fuzz_specs_are_bounded(spec):
    try:
        parsed = parse_spec(spec)
    except TfDevicesError as err:
        assert isinstance(err, SpecError) and "HINT:" in str(err) and len(str(err)) < 600
    else:
        assert len(parsed.keys) <= MAX_GPUS and (parsed.count or 0) <= MAX_GPUS
        assert all(k.isascii() for k in parsed.keys)
        assert parse_spec(parsed.text) == parsed


@pytest.mark.parametrize("spec", ["0-999999999", "auto:" + "9" * 4000, "0-1023," * 1000, 10**4000])
def test_hostile_specs_are_refused_without_allocating(spec):
    def refuse() -> None:
        with pytest.raises(SpecError):
            parse_spec(spec)

    assert peak_allocation(refuse) < 1 << 20


@pytest.mark.parametrize(
    "spec, what, fix",
    [
        ("GPU:3", "GPU spec", "write '3'"),
        ("GPU:0", "GPU spec", "write '0'"),
        ("/gpu:2", "GPU spec", "write '2'"),
        ("cuda:1", "GPU spec", "write '1'"),
        ("GPU:1,2", "--gpus", "write '1,2'"),
        (["GPU:4", 0], "exclude", "write '4,0'"),
        ("CPU:0", "GPU spec", "write 'none' to run on the CPU"),
    ],
)
def test_a_tensorflow_name_is_answered_with_the_index_it_stands_for(spec, what, fix):
    with pytest.raises(SpecError) as err:
        parse_spec(spec, what=what)
    assert str(err.value).startswith(f"{what} {spec!r}: ")
    assert f"HINT: {fix}" in str(err.value), str(err.value)
