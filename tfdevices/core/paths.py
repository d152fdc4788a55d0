"""Directories the toolkit writes into (TensorBoard log directories), checked before any work starts.

>>> import tempfile, os
>>> check_directory(os.path.join(tempfile.mkdtemp(), "run1"), what="--logdir")  # doctest: +ELLIPSIS
'.../run1'
"""

from __future__ import annotations

import os

from tfdevices.core.errors import InputError
from tfdevices.core.units import short_repr


def check_directory(path: str | os.PathLike[str], *, what: str = "logdir") -> str:
    """Checks that ``path`` is, or can be made, a directory this process can write into.

    Args:
        path: the directory (it need not exist yet).
        what: the input's name in messages (``"--logdir"``).

    Returns:
        ``path`` as a string.

    Raises:
        InputError: ``path`` is empty, is a file, lies under a file, or its nearest
            existing parent directory cannot be written.
    """
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{what}={short_repr(text)}: expected a directory.", hint="e.g. /tmp/logs/run1.")
    probe = os.path.abspath(text)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        where = (
            "is a file" if probe == os.path.abspath(text) else f"lies under {short_repr(probe, 200)}, which is a file"
        )
        raise InputError(
            f"{what}={short_repr(text, 200)} {where}, not a directory.",
            hint="choose a directory (one that does not exist yet is created).",
        )
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(
            f"{what}={short_repr(text, 200)}: {short_repr(probe, 200)} cannot be written by this user.",
            hint="choose a directory you can write to.",
        )
    return text
