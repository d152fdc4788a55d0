"""``pynvml`` for whole processes on a machine without a GPU: nvidia-ml-py's own module, every NVML call
answered by the fake NVML (``tests/fake_nvml.py``) serving the fixture ``FAKE_NVML`` names.

Put this folder first on ``PYTHONPATH``, the repository after it: ``import pynvml`` then runs
nvidia-ml-py's own module (its ctypes structures and error classes are built, as on a GPU machine)
and replaces its ``nvml*`` functions, ``NVML_*`` constants and ``NVMLError`` with the fake's.
``FAKE_NVML``: ``h200`` (default: the real H200, idle), ``h200-busy`` (under load), ``h200-old``
(an nvidia-ml-py without the versioned memory query), ``eight`` (8 mixed GPUs, one with MIG).

The benchmarks time ``tfdevices list`` against the NVML floor this way (``benchmarks/bench_floor.py``).
"""

import importlib.machinery
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_SPEC = importlib.machinery.PathFinder.find_spec(
    "pynvml", [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
)
if _SPEC is None or _SPEC.loader is None:
    raise ImportError("tests/pynvml_fake needs nvidia-ml-py installed (pip install nvidia-ml-py)")
exec(_SPEC.loader.get_code("pynvml"), globals())  # nvidia-ml-py's own module, from its bytecode

# the fake beside this folder, by its path: the tfdevices timed may be another tree's (benchmarks/bench_floor.py --tree)
_FAKE_SPEC = importlib.machinery.PathFinder.find_spec("fake_nvml", [os.path.dirname(_HERE)])
if _FAKE_SPEC is None or _FAKE_SPEC.loader is None:
    raise ImportError(f"tests/fake_nvml.py is not beside {_HERE}")
_fk = type(sys)("fake_nvml")
_fk.__file__ = _FAKE_SPEC.origin
exec(_FAKE_SPEC.loader.get_code("fake_nvml"), _fk.__dict__)

_WHICH = os.environ.get("FAKE_NVML", "h200")
_FIXTURES = {
    "h200": lambda: _fk.h200(),
    "h200-busy": lambda: _fk.h200(busy=True),
    "h200-old": lambda: _fk.h200(old_pynvml=True),
    "eight": lambda: _fk.FakeNvml(_fk.eight_gpus()),
}
if _WHICH not in _FIXTURES:
    raise ImportError(f"FAKE_NVML={_WHICH!r}: known fixtures {sorted(_FIXTURES)}")
_FAKE = _FIXTURES[_WHICH]()
if _FAKE.old_pynvml:
    del nvmlMemory_v2  # noqa: F821 (defined by nvidia-ml-py's module above)
for _name in dir(_FAKE):
    if _name.startswith(("nvml", "NVML_")):
        globals()[_name] = getattr(_FAKE, _name)
NVMLError = _fk.NVMLError
