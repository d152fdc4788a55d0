"""Where the compiled profile reader (``tfdevices.verify._hostwalk``) must be built, and where its tests skip.

``setup.py`` builds it as optional: an install on a machine without a C compiler leaves it out and
reads profiles in Python. Its tests then skip, saying why. Where a compiler exists, a reader that is
not built is a build that failed silently: its tests run and fail; and under ``CI=true`` they never
skip.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sysconfig

import pytest

from tfdevices.verify import host


def c_compiler() -> str | None:
    """The C compiler setuptools would run (``$CC``, else Python's own ``CC``), found on ``PATH``; ``None``: none."""
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    words = shlex.split(command)
    return shutil.which(words[0]) if words else None


def why_not_built() -> str | None:
    """Why the compiled reader may be missing here (no C compiler), or ``None`` where it must be built."""
    if host._compiled is not None or os.environ.get("CI", "").lower() == "true" or c_compiler() is not None:
        return None
    command = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return (
        f"no C compiler here ({shlex.split(command)[0] if command.strip() else 'cc'} is not on PATH): the install "
        "left the optional compiled profile reader out, and profiles are read in Python"
    )


#: A test of the compiled reader: skipped, saying why, only where there is no C compiler (never under CI=true).
needs_compiled = pytest.mark.skipif(why_not_built() is not None, reason=why_not_built() or "")
