"""One way to speak: every line tfdevices itself writes goes through :mod:`logging`, under the logger ``tfdevices``
(``tfdevices/jobs/console.py``), so an application's levels and handlers apply to it as to any library's.

Where the application configured no handler, the lines reach stderr as they always did, each alone (the fallback,
as :data:`logging.lastResort` decides); where it configured one, that handler has them, once. Each case runs in a
fresh Python: pytest's own handlers on the root logger are an application's configuration too.

The only bare ``print(`` calls of the package are the programs whose output is their product: the command line
(``tfdevices/cli.py``) and the demos (``tfdevices/demos/``); and one protocol, not speech: the CUDA probe's child
(``tfdevices/gpus/cuda_probe.py``) answers its parent with one JSON line on its stdout.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import tfdevices
from tests.helpers import run_py

PACKAGE = pathlib.Path(tfdevices.__file__).parent
#: The modules that may print, each with why: their output is their product, or a protocol with a parent.
PRINTS_ALLOWED = {
    "cli.py": "the command line: what it prints is its output",
    "demos/": "programs whose output is their product",
    "gpus/cuda_probe.py": "the probe's child answers its parent with one JSON line on stdout: a protocol",
}

#: A program's lines, in a fresh Python: a line of the jobs (INFO), a mend's detail (INFO) and a warning.
_SPEAK = """
import logging
from tfdevices.jobs.console import say
say("rank 1 joined: 100% ready")
logging.getLogger("tfdevices.mends.loopback").info("a mend's detail")
logging.getLogger("tfdevices.mends.loopback").warning("tfdevices: careful")
"""


def _speak(before: str = "", after: str = "") -> tuple[list[str], list[str]]:
    proc = run_py(before + _SPEAK + after, timeout=120)
    return proc.stdout.splitlines(), proc.stderr.splitlines()


def test_without_a_handler_the_lines_reach_stderr_each_alone_as_before() -> None:
    # the jobs' INFO lines shown (they always were), other INFO held back and warnings shown, as lastResort does
    out, err = _speak()
    assert (out, err) == ([], ["rank 1 joined: 100% ready", "tfdevices: careful"])


def test_the_applications_basic_config_prints_each_line_once_in_its_format() -> None:
    out, err = _speak("import logging\nlogging.basicConfig(format='%(levelname)s %(name)s: %(message)s')\n")
    assert out == []
    assert err == [
        "INFO tfdevices.jobs: rank 1 joined: 100% ready",
        "INFO tfdevices.mends.loopback: a mend's detail",  # tfdevices' loggers are at INFO: the handler decides
        "WARNING tfdevices.mends.loopback: tfdevices: careful",
    ]


@pytest.mark.parametrize("before_import", [True, False], ids=["set-before-import", "set-after-import"])
def test_level_warning_silences_tfdevices_info_lines(before_import: bool) -> None:
    # the application's level stays, whether it was set before tfdevices was imported or after
    quiet = "import logging\nlogging.getLogger('tfdevices').setLevel(logging.WARNING)\n"
    out, err = _speak(quiet if before_import else "import tfdevices.jobs.console\n" + quiet)
    assert (out, err) == ([], ["tfdevices: careful"])


def test_a_handler_of_the_applications_receives_the_lines_and_stderr_stays_quiet() -> None:
    mine = (
        "import logging, sys\n"
        "class Mine(logging.Handler):\n"
        "    def emit(self, record):\n"
        "        print(record.name, record.levelname, record.getMessage())\n"
        "logging.getLogger().addHandler(Mine())\n"
    )
    out, err = _speak(mine)
    assert out == [
        "tfdevices.jobs INFO rank 1 joined: 100% ready",
        "tfdevices.mends.loopback INFO a mend's detail",
        "tfdevices.mends.loopback WARNING tfdevices: careful",
    ]
    assert err == []


def test_while_a_launch_runs_its_console_has_the_jobs_lines_and_stderr_only_the_rest() -> None:
    out, err = _speak(
        "import io, sys\n"
        "from tfdevices.jobs.console import Console, on_console\n"
        "launch = on_console(Console(sys.stdout))\n"
        "launch.__enter__()\n",
        "launch.__exit__(None, None, None)\nsay('after the launch')\n",
    )
    assert out == ["[launcher] rank 1 joined: 100% ready"]
    assert err == ["tfdevices: careful", "after the launch"]


@pytest.mark.parametrize(
    "configure",
    [
        "import logging\nlogging.basicConfig(format='%(levelname)s:%(name)s:%(message)s')\n",
        "from absl import logging as absl_logging\nabsl_logging.use_absl_handler()\n",  # an absl.app program's root
    ],
    ids=["basicConfig", "absl"],
)
def test_in_a_launched_worker_the_lines_stay_as_they_are_on_stderr_for_the_launcher(configure: str) -> None:
    # the launcher reads a worker's stderr: the listen check's mark begins its line, and absl's "I1202 ...]" form
    # would be hidden as TensorFlow's start-up noise; each line once, whatever the program configures
    proc = run_py(
        "from tfdevices.jobs.console import worker_lines\n"
        "worker_lines()\n" + configure + _SPEAK + "from tfdevices.jobs.listen_check import LISTEN_MARK\n"
        "logging.getLogger('tfdevices.jobs.listen_check').error(LISTEN_MARK + ' rank 0 listens on more')\n"
        "logging.getLogger('someone.else').warning('their own line')\n",
        timeout=120,
    )
    err = proc.stderr.splitlines()
    assert err[:3] == [
        "rank 1 joined: 100% ready",
        "tfdevices: careful",
        "tfdevices: listen check: rank 0 listens on more",
    ]
    assert not [line for line in err[3:] if "tfdevices" in line or "joined" in line]  # each once
    assert err[-1].endswith("] their own line" if "absl" in configure else "WARNING:someone.else:their own line")


def test_a_second_copy_of_the_console_module_adds_no_second_fallback() -> None:
    # importlib.reload (a notebook's autoreload): the fallback already on the logger stays the one
    out, err = _speak("import importlib\nimport tfdevices.jobs.console as c\nimportlib.reload(c)\n")
    assert (out, err) == ([], ["rank 1 joined: 100% ready", "tfdevices: careful"])


# --------------------------------------------------------------------------- no bare print


def bare_prints(source: str) -> list[int]:
    """The lines of ``source`` that call ``print(`` itself (a docstring's example is not a call)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]


def test_the_finder_sees_a_call_not_a_docstring_or_another_print() -> None:
    source = '"""\n>>> print(1)\n"""\nimport sys\n\ndef f():\n    print("x", file=sys.stderr)\n    log.print("y")\n'
    assert bare_prints(source) == [7]


def test_no_module_prints_but_the_command_line_the_demos_and_the_probes_protocol() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if not name.startswith(tuple(PRINTS_ALLOWED)):
            found[name] = bare_prints(path.read_text(encoding="utf-8")) or None
    assert {name: lines for name, lines in found.items() if lines} == {}, "log it: logging.getLogger(__name__)"
    assert bare_prints((PACKAGE / "gpus" / "cuda_probe.py").read_text(encoding="utf-8"))  # the protocol is there
