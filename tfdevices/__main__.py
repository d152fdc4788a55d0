"""``python -m tfdevices`` is the ``tfdevices`` command."""

from tfdevices.cli import main

__all__ = []

if __name__ == "__main__":
    raise SystemExit(main())
