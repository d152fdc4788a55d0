"""``tfdevices doctor``: one screen to paste into a bug report.

Python, TensorFlow and Keras (Keras 3 or tf_keras, and which one ``tf.keras`` is), oneDNN, XLA,
the GPUs and the masks, whether this TensorFlow can use them (the ``cuda`` section: one line per cause,
with its fix, from :mod:`tfdevices.gpus.cuda_check`), where this process sits in a job, which mends apply
here and why, and what a launched worker would listen on. It shows only the environment variables tfdevices reads, as
tfdevices reads them, and never a secret (a token is shown as set or unset).

Versions come from the installed packages' metadata, found by the names programs import
(``keras`` is Keras whether the distribution is ``keras`` or ``keras-nightly``); TensorFlow is
imported (to run each mend's detection) only when ``tensorflow=True``. Where TensorFlow is not
installed each mend's detection runs all the same: none of them imports anything then.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

from tfdevices import __version__, mends
from tfdevices.core.doctor_report import Report
from tfdevices.core.errors import TfDevicesError
from tfdevices.core.tf_door import import_tf
from tfdevices.core.units import format_bytes
from tfdevices.gpus import cuda_check, cuda_facts, cuda_log
from tfdevices.gpus.discovery import discover
from tfdevices.gpus.inventory import INVENTORY_ENV
from tfdevices.jobs.env import LaunchInfo, launch_info
from tfdevices.jobs.handshake import TOKEN_ENV
from tfdevices.jobs.progress import progress_dir
from tfdevices.jobs.stall import policy_from_env
from tfdevices.mends.base import APPLIED, MENDS_ENV, NOT_REACHED, WOULD_APPLY, installed, is_installed
from tfdevices.mends.exit_barrier import EXIT_WAIT_ENV, exit_wait_s
from tfdevices.runtime import quiet_tensorflow_logs

#: CPU features with which TensorFlow turns oneDNN on by default on Linux x86 (``IsMKLEnabled`` in
#: tensorflow/core/util/util.cc: AVX512_VNNI, AVX512_BF16, AVX_VNNI, AMX).
_ONEDNN_CPU_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def diagnose(*, env: Mapping[str, str] | None = None, tensorflow: bool = True) -> Report:
    """Gathers the report.

    Args:
        env: the environment to read (default ``os.environ``).
        tensorflow: import TensorFlow to run each mend's detection (``False``: versions from metadata only).

    Returns:
        A :class:`Report`.
    """
    env = os.environ if env is None else env
    present = is_installed("tensorflow")
    loaded = False
    if tensorflow and present:
        quiet_tensorflow_logs()
        try:
            import_tf()
            loaded = True
        except TfDevicesError:
            pass  # said in the tensorflow section
    return Report(
        (
            ("python", _python()),
            ("tensorflow", _tensorflow(env, loaded)),
            ("gpus", _gpus(env)),
            ("cuda", _cuda(env, loaded)),
            ("job", _job(env)),
            ("mends", _mends(env, loaded or not present)),
            ("launch", _launch(env)),
        )
    )


def _python() -> tuple[tuple[str, str], ...]:
    return (
        ("python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.platform})"),
        ("machine", f"{platform.machine()}, {os.cpu_count()} CPUs"),
        ("tfdevices", __version__),
    )


def _version(import_name: str) -> str | None:
    """``"3.16.0.dev2026102704 (keras-nightly)"``: the version of what ``import keras`` finds, from metadata.

    The distribution is named where it is not the import name's own; several that install the same
    name are all named (their files are whichever was installed last).
    """
    found = installed(import_name)
    own = {import_name, import_name.replace("_", "-")}
    words = [d.version + ("" if d.name.lower().replace("_", "-") in own else f" ({d.name})") for d in found]
    if len(words) > 1:
        return " and ".join(words) + f": several distributions install `{import_name}`"
    if not words and is_installed(import_name):
        return "installed (no package metadata)"
    return words[0] if words else None


def _tensorflow(env: Mapping[str, str], load: bool) -> tuple[tuple[str, str], ...]:
    tf_version = _version("tensorflow")
    keras_version, tf_keras_version = _version("keras"), _version("tf_keras")
    rows = [
        (
            "tensorflow",
            tf_version or "not installed (in the tfdevices clone, pip install -e '.[cpu]' or '.[and-cuda]')",
        ),
        ("keras", keras_version or "not installed"),
        ("tf_keras", tf_keras_version or "not installed"),
        ("tf.keras is", _tf_keras_is(env, tf_version, keras_version, tf_keras_version)),
        ("oneDNN", _onednn(env)),
        ("XLA", _xla(env)),
    ]
    if load and tf_version:
        rows.append(("build", _build_info()))
    return tuple(rows)


def _tf_keras_is(env: Mapping[str, str], tf_version: str | None, keras: str | None, tf_keras: str | None) -> str:
    """Which Keras ``tf.keras`` is here (TensorFlow 2.16 on: Keras 3, or tf_keras under ``TF_USE_LEGACY_KERAS``)."""
    legacy = env.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")
    if not tf_version:
        return "none: TensorFlow is not installed"
    if legacy and tf_keras:
        still = f"Keras {keras}" if keras else "no Keras 3 (not installed)"
        return f"tf_keras {tf_keras} (TF_USE_LEGACY_KERAS set; `import keras` is {still})"
    if legacy:
        return "none: TF_USE_LEGACY_KERAS asks for tf_keras, which is not installed (pip install tf-keras)"
    if keras:
        return f"Keras {keras}"
    if tf_keras:
        return f"none: Keras 3 is not installed (tf_keras {tf_keras} is: set TF_USE_LEGACY_KERAS=1 to use it)"
    return "none: Keras is not installed"


def _onednn(env: Mapping[str, str]) -> str:
    value = env.get("TF_ENABLE_ONEDNN_OPTS")
    if value is not None:
        said = value.strip().lower()
        if said in ("0", "false"):
            return "off (TF_ENABLE_ONEDNN_OPTS says off)"
        if said in ("1", "true"):
            return "on (TF_ENABLE_ONEDNN_OPTS says on)"
        return "TF_ENABLE_ONEDNN_OPTS is set to something other than 0 or 1: TensorFlow's default applies"
    flags = _cpu_flags()
    found = [f for f in _ONEDNN_CPU_FLAGS if f in flags]
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"TF_ENABLE_ONEDNN_OPTS unset; TensorFlow's default for {platform.machine()}"
    if found:
        return f"on by default here (TF_ENABLE_ONEDNN_OPTS unset; this CPU has {found[0]}): MatMul runs as _MklMatMul"
    return (
        "off by default here (TF_ENABLE_ONEDNN_OPTS unset; this CPU has none of " + ", ".join(_ONEDNN_CPU_FLAGS) + ")"
    )


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f.read(1 << 20).splitlines():
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _xla(env: Mapping[str, str]) -> str:
    flags = env.get("TF_XLA_FLAGS")
    if flags is None:
        return "TF_XLA_FLAGS unset: XLA only where a model or function asks (jit_compile=True)"
    auto = "--tf_xla_auto_jit=" in flags and "--tf_xla_auto_jit=0" not in flags
    return f"TF_XLA_FLAGS set (auto-clustering {'on' if auto else 'off'})"


def _build_info() -> str:
    try:
        info = import_tf().sysconfig.get_build_info()
    except TfDevicesError as err:
        return f"TensorFlow cannot be imported: {err}"
    if info.get("is_cuda_build") and (info.get("cuda_version") or info.get("cudnn_version")):
        return f"CUDA {info.get('cuda_version', '?')}, cuDNN {info.get('cudnn_version', '?')}"
    if info.get("is_cuda_build"):
        return "a CUDA build (its CUDA and cuDNN versions are not recorded in its build info)"
    return "CPU only (not a CUDA build)"


def _gpus(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    try:
        inventory = discover(env=env, topology=False)
    except TfDevicesError as err:
        return (("error", str(err)),)
    source = inventory.source + (f" (driver {inventory.driver_version})" if inventory.driver_version else "")
    if env.get(INVENTORY_ENV):  # a saved listing, not what this machine's driver says now
        source += f": the saved listing {INVENTORY_ENV} names, not this machine's GPUs"
    rows = [
        ("source", source),
        ("CUDA_VISIBLE_DEVICES", inventory.mask_words()),
        ("CUDA_DEVICE_ORDER", inventory.order_words()),
    ]
    if not inventory.gpus:
        rows.append(("gpus", f"none ({inventory.reason or 'none found'})"))
    for gpu in inventory.gpus:
        memory = f"{format_bytes(gpu.memory_free)} free of {format_bytes(gpu.memory_total)}" if gpu.memory_total else ""
        seen = f"CUDA {gpu.cuda_ordinal}" if gpu.cuda_ordinal is not None else "masked"
        rows.append((f"GPU {gpu.key}", ", ".join(x for x in (gpu.name, seen, memory) if x)))
    rows += [("note", note) for note in inventory.notes]
    return tuple(rows)


def cuda_report(*, env: Mapping[str, str] | None = None) -> Report:
    """The ``cuda`` section alone: TensorFlow is neither imported nor started (``tfdevices doctor --cuda`` builds
    the same report without importing this module).

    Args:
        env: the environment to read (default ``os.environ``).

    Returns:
        A :class:`Report` of one section.
    """
    return Report((("cuda", _cuda(os.environ if env is None else env, False)),))


def _cuda(env: Mapping[str, str], tensorflow: bool) -> tuple[tuple[str, str], ...]:
    """One row per finding of :func:`tfdevices.gpus.cuda_check.diagnose` (label: its cause).

    Where the checks find nothing while NVML sees GPUs, and TensorFlow may be started (``tensorflow``), a
    fresh process starts it verbose and its log lines are read as the same causes: the last resort.
    """
    facts = cuda_facts.gather(env=env)
    findings = cuda_check.diagnose(facts)
    if tensorflow and facts.gpus and cuda_check.first_cause(findings) is None:
        findings += cuda_log.log_findings(tensorflow_log(env))
    return cuda_check.rows(facts, findings)


def tensorflow_log(env: Mapping[str, str], timeout: float = 300.0) -> str:
    """What TensorFlow logs when it lists the GPUs in a fresh process, verbose (its loader's lines included)."""
    import subprocess  # noqa: PLC0415 (the last resort only)

    code = "import tensorflow as tf; tf.config.list_physical_devices('GPU')"
    loud = {**env, "TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "dso_loader=1,cuda_diagnostics=1,gpu_device=1"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], env=loud, capture_output=True, text=True, timeout=timeout, errors="replace"
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"(TensorFlow could not be started: {type(err).__name__})"
    return (proc.stderr + proc.stdout)[-(1 << 20) :]


def _job(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    try:
        info = launch_info(env)
    except TfDevicesError as err:
        return (("error", str(err)),)
    pods = info.tf_config.cluster["worker"] if info.source == "kubernetes" and info.tf_config else ()
    return (
        ("rank", _rank_row(info)),
        *((("pods", f"{len(pods):,} in the job (launch_info().tf_config names them)"),) if pods else ()),
        *(("note", note) for note in info.notes),
        (EXIT_WAIT_ENV, _exit_wait(env)),
        (TOKEN_ENV, "set" if env.get(TOKEN_ENV) else "unset"),
        *_stalls(env),
    )


def _rank_row(info: LaunchInfo) -> str:
    """A process's rank, its local rank out of how many (when the source says), and why: the reason names the
    source in words (``"srun started this process as task 1 ..."``, ``"RANK/WORLD_SIZE are set ..."``); a local
    rank the source did not set is said to be assumed, in the job's ``note`` row.
    """
    size = "an unknown number on this machine" if info.local_world_size is None else info.local_world_size
    return f"{info.rank} of {info.world_size}, local rank {info.local_rank} of {size}: {info.reason}"


def _stalls(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    try:
        policy, where = policy_from_env(env), progress_dir(env)
    except TfDevicesError as err:
        return (("stalls", f"error: {err}"),)
    window = f"{policy.window_s:g} s" if policy.window_s else "max(60 s, 20x the median step); 600 s before a step"
    timeout = f"stop the job {policy.timeout_s:g} s past the window" if policy.timeout_s else "report, never stop"
    return (
        ("stall window", window),
        ("stall timeout", timeout),
        ("progress records", where or "none here (tfdevices launch and srun set them)"),
    )


def _exit_wait(env: Mapping[str, str]) -> str:
    try:
        return f"{exit_wait_s(env):g} s" + ("" if EXIT_WAIT_ENV in env else " (default)")
    except TfDevicesError as err:
        return f"error: {err}"


def _mends(env: Mapping[str, str], load: bool) -> tuple[tuple[str, str], ...]:
    try:
        off = mends.turned_off(env)
        said = (
            f"off: {', '.join(sorted(off))}" if off else f"{'set' if env.get(MENDS_ENV) else 'unset'}: no mend is off"
        )
    except TfDevicesError as err:
        return ((MENDS_ENV, str(err)),)
    rows = [(MENDS_ENV, said)]
    for status in mends.applied():
        if status.name in off:
            rows.append((status.name, "off"))
            continue
        if load and status.state == NOT_REACHED:
            status = next(m for m in mends.MENDS if m.name == status.name).preview()
        shown_state = {WOULD_APPLY: "applies here", APPLIED: "applied"}.get(status.state, status.state.value)
        rows.append((status.name, f"{shown_state}: {status.detail}"))
    return tuple(rows)


def _launch(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    try:
        loopback_on = "loopback" not in mends.turned_off(env)
    except TfDevicesError:
        return (("one machine", f"unknown: {MENDS_ENV} cannot be read (see mends)"),)
    kept = "kept there by the loopback mend" if loopback_on else "the loopback mend is off: nothing keeps it there"
    one = (
        f"tfdevices launch -n N: each worker's TensorFlow server listens on 127.0.0.1 only ({kept}); "
        "a worker found listening on more stops the job (--listen all: every interface)"
    )
    return (
        ("one machine", one),
        ("many machines", "tfdevices launch --nnodes K: each worker listens on its node's own address (--node-addr)"),
    )
