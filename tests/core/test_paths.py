from __future__ import annotations

import pytest

from tfdevices.core.errors import InputError
from tfdevices.core.paths import check_directory


def test_existing_and_new_directories_are_accepted(tmp_path):
    assert check_directory(tmp_path) == str(tmp_path)
    assert check_directory(tmp_path / "a" / "b", what="--logdir") == str(tmp_path / "a" / "b")
    assert not (tmp_path / "a").exists()  # checking creates nothing


@pytest.mark.parametrize(
    "where, words",
    [
        ("file", "is a file, not a directory"),
        ("file/run", "lies under"),
        ("file/a/b/c", "lies under"),
    ],
)
def test_a_file_or_a_path_under_a_file_is_refused(tmp_path, where, words):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError) as err:
        check_directory(tmp_path / where, what="--logdir")
    text = str(err.value)
    assert text.startswith(f"--logdir='{tmp_path / where}'") and words in text and "HINT:" in text


def test_an_empty_path_is_refused():
    with pytest.raises(InputError, match="expected a directory"):
        check_directory("", what="--logdir")
