from __future__ import annotations

import pytest

from tfdevices import MemorySizeError, format_bytes, parse_memory


@pytest.mark.parametrize("value, expected", [
    (0, 0), (1234, 1234), ("512B", 512), ("1 KB", 1000), ("1KiB", 1024), ("8GiB", 8 << 30),
    ("8gib", 8 << 30), ("1.5GB", 1_500_000_000), ("2 MiB", 2 << 20), ("1TiB", 1 << 40), (" 3 mb ", 3_000_000),
])
def test_sizes(value, expected):
    assert parse_memory(value) == expected


@pytest.mark.parametrize("value, first_words", [
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
])
def test_bad_sizes(value, first_words):
    with pytest.raises(MemorySizeError) as err:
        parse_memory(value)
    assert str(err.value).startswith(first_words)
    assert "HINT:" in str(err.value)


def test_size_error_names_the_flag():
    with pytest.raises(MemorySizeError, match=r"^--memory_limit '4'"):
        parse_memory("4", what="--memory_limit")


@pytest.mark.parametrize("n, text", [(None, "n/a"), (0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"),
                                     (8 << 30, "8.0 GiB"), (3 << 40, "3.0 TiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text
