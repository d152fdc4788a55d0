"""One error hierarchy: every error is a TfDevicesError; bad input is also a ValueError; HINT at the end."""

from __future__ import annotations

import inspect

import pytest

import tfdevices
from tfdevices.core import errors

ERRORS = [
    cls
    for _, cls in inspect.getmembers(errors, inspect.isclass)
    if issubclass(cls, Exception) and cls.__module__ == errors.__name__
]
BAD_INPUT = [
    errors.InputError,
    errors.UsageError,
    errors.SpecError,
    errors.MemorySizeError,
    errors.EnvVarError,
    errors.InventoryFileError,
    errors.TfConfigError,
    errors.LaunchError,
    errors.PlanError,
]


def test_every_error_derives_from_the_root_and_is_exported():
    assert len(ERRORS) >= 15
    for cls in ERRORS:
        assert issubclass(cls, errors.TfDevicesError), cls
        assert getattr(tfdevices, cls.__name__) is cls, f"tfdevices.{cls.__name__} is not exported"


@pytest.mark.parametrize("cls", BAD_INPUT)
def test_bad_input_is_a_value_error(cls):
    assert issubclass(cls, ValueError)


@pytest.mark.parametrize("cls", ERRORS)
def test_the_message_is_one_line_ending_with_the_hint(cls):
    err = cls("spec '9': no GPU 9; this machine has 0, 1.", hint="pick one of 0, 1.")
    assert str(err) == "spec '9': no GPU 9; this machine has 0, 1. HINT: pick one of 0, 1."
    assert (err.message, err.hint) == ("spec '9': no GPU 9; this machine has 0, 1.", "pick one of 0, 1.")
    assert str(cls("no hint")) == "no hint"
