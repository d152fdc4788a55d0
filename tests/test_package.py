from __future__ import annotations

import subprocess
import sys

import pytest

import tfdevices
from tests.helpers import REPO, subprocess_env
from tfdevices.demos import DEMOS


def test_importing_any_module_does_not_import_tensorflow():
    code = (
        "import importlib, pkgutil, sys, tfdevices\n"
        "names = [m.name for m in pkgutil.walk_packages(tfdevices.__path__, 'tfdevices.')]\n"
        "assert len(names) > 25, names\n"
        "for name in names:\n"
        "    if not name.startswith('tfdevices.demos.'):  # each defines absl flags: one per process, below\n"
        "        if name != 'tfdevices.tensorboard.plugin':  # TensorBoard's own entry point: a TBPlugin class\n"
        "            importlib.import_module(name)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras', "
        "'tensorboard', 'numpy', 'pynvml'))\n"
        "print(heavy)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("name", sorted(tfdevices._EXPORTS))
def test_every_public_name_resolves(name):
    assert getattr(tfdevices, name) is not None
    assert name in dir(tfdevices)


def test_errors_share_one_root():
    for name, module in tfdevices._EXPORTS.items():
        if module == "errors":
            assert issubclass(getattr(tfdevices, name), tfdevices.TfDevicesError)


def test_unknown_attribute():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tfdevices.nope  # noqa: B018


@pytest.mark.parametrize("demo", sorted(DEMOS))
def test_importing_a_demo_does_not_import_tensorflow(demo):
    code = (
        f"import sys, tfdevices.demos.{demo}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'tf_keras')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), cwd=REPO, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_only_runtime_sets_environment_variables_or_calls_tf_config():
    import pathlib
    import re

    effect = re.compile(
        r"os\.environ\[[^\]]+\]\s*=|os\.environ\.(update|setdefault|pop)\(|os\.putenv\(|"
        r"tf\.config\.(set_|experimental\.set_)|set_logical_device_configuration\(|"
        r"set_visible_devices\(|set_memory_growth\("
    )
    package = pathlib.Path(tfdevices.__file__).parent
    offenders = [
        f"{path.relative_to(package.parent)}:{n}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "runtime.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if effect.search(line)
        # the launcher sets its workers' environment: the sitecustomize it writes for them puts back the TF_CONFIG it
        # handed over in a file (too large for one variable); no process of the user's own is changed
        and not (path.name == "worker_sitecustomize.py" and line.strip() == 'os.environ["TF_CONFIG"] = _f.read()')
    ]
    assert offenders == []
    assert effect.search((package / "runtime.py").read_text())  # the pattern does find them where they are


@pytest.mark.parametrize(
    "module",
    [
        "core.devices",
        "core.errors",
        "core.json_records",
        "core.lazy",
        "core.record_class",
        "core.units",
        "errors",
        "gpus.discovery",
        "gpus.gpuinfo",
        "gpus.inventory",
        "gpus.nvml",
        "gpus.selection",
        "gpus.spec",
        "gpus.topology",
        "gpus.visibility",
        "jobs.cluster",
        "jobs.slurm",
        "jobs.straggler",
        "layers.plan",
        "core.memory_limits",
        "runtime",
        "tensorboard.report_reading",
        "tensorboard.views",
    ],
)
def test_docstring_examples_of_the_pure_modules(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"tfdevices.{module}"))
    assert result.attempted > 0 and result.failed == 0
