"""``python -m tfdevices`` is the ``tfdevices`` command."""

from tfdevices.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
