"""One error hierarchy for the whole toolkit.

Every error tfdevices raises derives from :class:`TfDevicesError`; errors about
bad input also derive from :class:`ValueError`. A message says what was asked,
what exists, and ends with a ``HINT:`` telling the user what to do, all on one
line so the command line can print it as is.

>>> err = SpecError("GPU spec '9': no GPU with NVML index 9; this machine has 0, 1.",
...                 hint="pick one of 0, 1, or 'auto:N' for the N best.")
>>> str(err)
"GPU spec '9': no GPU with NVML index 9; this machine has 0, 1. HINT: pick one of 0, 1, or 'auto:N' for the N best."
>>> isinstance(err, ValueError)
True
"""

from __future__ import annotations


class TfDevicesError(Exception):
    """Base of every error tfdevices raises.

    Args:
        message: what was asked and what exists.
        hint: how to fix it; appended as ``HINT: ...``.
    """

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} HINT: {hint}")


class InputError(TfDevicesError, ValueError):
    """Bad input: a spec, a flag, a file or an environment variable."""


class UsageError(InputError):
    """A command line that does not parse: unknown option, missing or malformed argument."""

    command: str  # the command whose line it is (``tfdevices launch``), set by the CLI's parser


class SpecError(InputError):
    """A device spec (``"0,2"``, ``"auto:2"``, ``"CPU:1"`` ...) is malformed or names nothing."""


class MemorySizeError(InputError):
    """A memory size (``"8GiB"``) is malformed."""


class EnvVarError(InputError):
    """An environment variable holds a value tfdevices cannot use."""


class InventoryFileError(InputError):
    """A saved inventory (``tfdevices list --json``) cannot be read."""


class SelectionError(TfDevicesError, ValueError):
    """A valid request that the available devices cannot satisfy."""


class TfConfigError(EnvVarError):
    """``TF_CONFIG`` is malformed or inconsistent."""


class LaunchError(InputError):
    """Rank / world-size information from the launch environment is malformed or contradictory."""


class PlanError(InputError):
    """A layer plan cannot be made or a manual plan is invalid."""


class RuntimeInitializedError(TfDevicesError, RuntimeError):
    """TensorFlow's runtime already started, so devices can no longer be changed."""


class TensorFlowMissingError(TfDevicesError, ImportError):
    """The operation needs TensorFlow, which is not installed."""


class PlacementAssertionError(TfDevicesError, AssertionError):
    """A placement check (``report.assert_on`` ...) failed."""


class PlacementChangedError(TfDevicesError, RuntimeError):
    """The placement changed during training (``PlacementLogger(on_change="raise")``)."""


class ReservationError(TfDevicesError):
    """No device could be reserved (all held by other processes)."""


class StrategyError(TfDevicesError, ValueError):
    """A tf.distribute strategy cannot be built as asked."""


class Terms:
    """How the user named the settings, so that a message and its HINT speak as they wrote:
    Python keywords (the API), the ``tfdevices`` command line, or absl flags.

    Args:
        style: ``"python"``, ``"cli"`` or ``"absl"``.
        names: settings named otherwise in this style (``(("spec", "--gpus"),)``).

    >>> [style.setting("memory_limit", "4GiB") for style in (PYTHON, CLI, ABSL)]
    ["memory_limit='4GiB'", '--memory-limit 4GiB', '--memory_limit=4GiB']
    >>> CLI.name("spec"), ABSL.setting("spec", "none"), CLI.setting("spec", "none"), CLI.setting("memory_growth", True)
    ('GPU spec', '--gpus=none', "'none'", '--memory-growth')
    """

    __slots__ = ("names", "style")

    def __init__(self, style: str = "python", names: tuple[tuple[str, str], ...] = ()) -> None:
        # a plain class: `tfdevices list` imports this module, and stays clear of dataclasses
        self.style = style
        self.names = names

    def __repr__(self) -> str:
        return f"Terms({self.style!r})"

    def name(self, param: str) -> str:
        """The setting's name as the user wrote it (``"spec"``: the GPU spec)."""
        named = dict(self.names)
        if param in named:
            return named[param]
        if param == "spec":
            return "--gpus" if self.style == "absl" else "GPU spec"
        if self.style == "cli":
            return "--" + param.replace("_", "-")
        return "--" + param if self.style == "absl" else param

    def setting(self, param: str, value: object) -> str:
        """The setting with a value, as the user would write it: ``memory_limit='4GiB'``,
        ``--memory-limit 4GiB``, ``--memory_limit=4GiB``.
        """
        name = self.name(param)
        if name == "GPU spec":  # the positional spec: its value alone
            return repr(str(value))
        if self.style == "python":
            return f"{name}={value!r}"
        if isinstance(value, bool):
            return name if value else (f"--no{name[2:]}" if self.style == "absl" else f"no {name}")
        return f"{name}={value}" if self.style == "absl" else f"{name} {value}"


#: Messages in the API's terms: keyword arguments (``memory_limit='4GiB'``); the default.
PYTHON = Terms("python")
#: Messages in the ``tfdevices`` command line's terms (``--memory-limit 4GiB``, the spec as typed).
CLI = Terms("cli")
#: Messages in absl flags' terms (``--memory_limit=4GiB``, ``--gpus=none``): the demos and ``tfdevices.flags``.
ABSL = Terms("absl")
