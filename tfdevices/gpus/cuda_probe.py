"""Loads what TensorFlow loads at start (the CUDA driver, then its libraries), in a process of its own.

Run as a file by :func:`tfdevices.gpus.cuda_facts.gather` (``python -I -S cuda_probe.py``, the request as JSON
on stdin, the answer as JSON on stdout), never imported to run in a caller: a library that loads may start
threads, register handlers or abort, and a caller's process must not carry it. It imports the standard
library only (``ctypes``, ``json``), so it runs wherever Python does, tfdevices installed or not.

The request: ``{"driver": PATH or null, "libraries": [[NAME, PATH], ...]}``, each loaded in that order with
``RTLD_GLOBAL``, as TensorFlow's loader does (a later library finds the symbols of the ones before it). The
answer: ``{"driver": {"error", "cu_init", "version", "count"}, "libraries": [[NAME, ERROR or null], ...]}``;
an error is the loader's own text, at most 1,000 characters.

Run as gather runs it (this process loads nothing):

>>> import json, subprocess, sys
>>> ask = {"driver": None, "libraries": [["nothing", "/nonexistent/libnothing.so.1"]]}
>>> said = subprocess.run([sys.executable, "-I", "-S", __file__], input=json.dumps(ask), capture_output=True,
...                       text=True, timeout=60).stdout
>>> json.loads(said)["libraries"][0][1][:29]
'/nonexistent/libnothing.so.1:'
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (the probe's process imports nothing it needs not)
if TYPE_CHECKING:
    from typing import Any


_MAX_ERROR = 1000


def probe(request: dict[str, Any]) -> dict[str, Any]:
    """Loads the driver and each library of ``request``; see the module's docstring.

    Args:
        request: ``{"driver": path or None, "libraries": [[name, path], ...]}``.

    Returns:
        What each load said: ``{"driver": ..., "libraries": [[name, error or None], ...]}``.
    """
    import ctypes  # noqa: PLC0415 (run in the probe's own process only)

    out: dict[str, Any] = {"driver": None, "libraries": []}
    driver = request.get("driver")
    if driver:
        out["driver"] = _driver(ctypes, driver)
    for name, path in request.get("libraries", ())[:32]:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            out["libraries"].append([name, None])
        except OSError as err:
            out["libraries"].append([name, str(err)[:_MAX_ERROR]])
    return out


def _driver(ctypes: Any, path: str) -> dict[str, Any]:
    """``libcuda``: loaded, ``cuInit(0)``'s code, ``cuDriverGetVersion`` and ``cuDeviceGetCount`` where it starts."""
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as err:
        return {"error": str(err)[:_MAX_ERROR]}
    found: dict[str, Any] = {"error": None, "cu_init": None, "version": None, "count": None}
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    try:
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
            found["version"] = version.value
        found["cu_init"] = int(lib.cuInit(0))
        if found["cu_init"] == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0:
            found["count"] = count.value
    except AttributeError as err:  # not a CUDA driver library
        found["error"] = str(err)[:_MAX_ERROR]
    return found


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(probe(json.loads(sys.stdin.read(1 << 20)))))
