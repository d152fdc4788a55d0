from __future__ import annotations

import pytest

from tfdevices import MemorySizeError, format_bytes, parse_memory


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, 0),
        (1234, 1234),
        ("512B", 512),
        ("1 KB", 1000),
        ("1KiB", 1024),
        ("8GiB", 8 << 30),
        ("8gib", 8 << 30),
        ("1.5GB", 1_500_000_000),
        ("2 MiB", 2 << 20),
        ("1TiB", 1 << 40),
        (" 3 mb ", 3_000_000),
    ],
)
def test_sizes(value, expected):
    assert parse_memory(value) == expected


@pytest.mark.parametrize(
    "value, first_words",
    [
        ("8", "memory size '8': a bare number is ambiguous"),
        ("1.5", "memory size '1.5': a bare number is ambiguous"),
        ("", "memory size '': not a size"),
        ("GiB", "memory size 'GiB': not a size"),
        ("8 GiBs", "memory size '8 GiBs': unknown unit 'GiBs'"),
        ("8G", "memory size '8G': unknown unit 'G'"),
        ("8 bytes", "memory size '8 bytes': unknown unit"),
        ("-8GiB", "memory size '-8GiB': not a size"),
        ("8 Gi B", "memory size '8 Gi B': not a size"),
        ("1e3MB", "memory size '1e3MB': not a size"),
        (-1, "memory size -1: a size cannot be negative"),
        (1.5, "memory size 1.5: expected bytes as an int"),
        (True, "memory size True: expected bytes as an int"),
        (None, "memory size None: expected bytes as an int"),
    ],
)
def test_bad_sizes(value, first_words):
    with pytest.raises(MemorySizeError) as err:
        parse_memory(value)
    assert str(err.value).startswith(first_words)
    assert "HINT:" in str(err.value)


def test_size_error_names_the_flag():
    with pytest.raises(MemorySizeError, match=r"^--memory_limit '4'"):
        parse_memory("4", what="--memory_limit")


@pytest.mark.parametrize(
    "n, text",
    [(None, "n/a"), (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (8 << 30, "8.0 GiB"), (3 << 40, "3.0 TiB")],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


# ---------------------------------------------------------------- hostile input: digits, sizes, long echoes

from hypothesis import (  # noqa: E402
    given,
    settings,
    strategies as st,
)

from tfdevices import TfDevicesError  # noqa: E402
from tfdevices.core.units import is_digits, parse_count, short_repr  # noqa: E402


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0", True),
        ("0123", True),
        ("", False),
        ("-1", False),
        (" 1", False),
        ("1.0", False),
        ("\u0663", False),
        ("\u00b2", False),
        ("\uff11", False),
        ("1\u0663", False),
    ],
)
def test_only_ascii_digits_are_digits(text, expected):
    assert is_digits(text) is expected


@pytest.mark.parametrize(
    "text, limit, expected",
    [
        ("0", 5, 0),
        ("5", 5, 5),
        ("6", 5, None),
        ("0005", 5, 5),
        ("9" * 100_000, 10**9, None),
        ("\u0663", 9, None),
        ("", 5, None),
        ("-1", 5, None),
    ],
)
def test_parse_count_is_bounded_before_int(text, limit, expected):
    assert parse_count(text, limit=limit) == expected


@pytest.mark.parametrize("value", ["\u0668GiB", "\u0668.\u0665 GB", "\uff18GiB"])
def test_sizes_with_non_ascii_digits_are_errors(value):
    with pytest.raises(MemorySizeError, match="not a size"):
        parse_memory(value)


def test_long_size_is_shortened_in_the_message():
    with pytest.raises(MemorySizeError) as err:
        parse_memory("9" * 100_000 + "GiB")
    assert len(str(err.value)) < 300 and "(100003 chars)" in str(err.value)


def test_shown_keeps_short_values_and_bounds_long_ones():
    assert short_repr("0,1") == "'0,1'"
    assert short_repr(3) == "3"
    long = short_repr("x" * 10**6)
    assert len(long) <= 80 and "(1000000 chars)" in long
    assert short_repr("\ud800") == "'\\ud800'"  # a lone surrogate is escaped, so it can be printed


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.integers(),
        st.floats(),
        st.none(),
        st.text(alphabet="0123456789.eE+- kKmMgGtTiIbB\u0663", max_size=40),
    )
)
def test_random_sizes_raise_only_our_errors(value):
    try:
        size = parse_memory(value)
    except TfDevicesError as err:
        assert isinstance(err, MemorySizeError) and "HINT:" in str(err)
    else:
        assert isinstance(size, int) and size >= 0
