"""The one parser of a network address: a host, a port, ``HOST:PORT`` and ``[HOST:]PORT`` (architecture, rule 14).

Every address tfdevices reads goes through here: the launch command's ``--master-addr``,
``--master-port``, ``--node-addr`` and ``--listen``, the metrics address (``--metrics``,
``TFDEVICES_METRICS``), ``TF_CONFIG``'s cluster entries, and what another machine's
launcher says at the rendezvous. Each function is bounded (it reads at most
:data:`MAX_ADDRESS` characters) and pure, and each error is one line that names the
input (``asked``), what is wrong with it and how to fix it (``hint``). An input that came
from the environment is never repeated in a message (``show=False``): the message says
what is wrong with it, not what it holds.

A host is an IPv4 address (``10.0.0.5``), an IPv6 address in brackets (``[::1]``, where a
port follows) or a host name (``node7``, ``pod-0.tfd.ns.svc``: ASCII letters, digits, ``-``
and ``_``, in dot-separated labels of 1 to 63 characters, 253 in all). A port is 1 to 5
ASCII digits. Nothing here resolves a name: that needs the machine, and its caller.

>>> parse_host_port("node7:2222", "--master")
HostPort(host='node7', port=2222)
>>> parse_host_port("9100", "--metrics '9100'", default_host="127.0.0.1", low=0)
HostPort(host='127.0.0.1', port=9100)
>>> parse_host_port("node7:99999", "--metrics 'node7:99999'", default_host="127.0.0.1")
Traceback (most recent call last):
...
tfdevices.core.errors.LaunchError: --metrics 'node7:99999': not [HOST:]PORT: its port 99999 is not in 1..65535. \
HINT: write HOST:PORT, e.g. 10.0.0.5:2222, or PORT alone.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from tfdevices.core.errors import InputError, LaunchError
from tfdevices.core.units import short_repr

MAX_HOST = 253
"""The longest host name (DNS's limit)."""

MAX_ADDRESS = MAX_HOST + 2 + 1 + 5
"""The longest ``HOST:PORT`` read: a host (or a bracketed IPv6 address), ``:`` and five digits."""

_NAME_RULE = "letters, digits, - and _, in dot-separated labels"
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?", re.ASCII)


@dataclasses.dataclass(frozen=True)
class HostPort:
    """A checked ``HOST:PORT``.

    Attributes:
        host: an IPv4 address, an IPv6 address (without its brackets) or a host name.
        port: the TCP port.
    """

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def host_problem(text: object, *, show: bool = True) -> str | None:
    """What is wrong with ``text`` as a host (``None``: nothing); ``show``: the problem may quote it.

    >>> host_problem("node-7.cluster"), host_problem("10.0.0.5"), host_problem("[::1]")
    (None, None, None)
    >>> host_problem("999.0.0.1")
    "'999.0.0.1' is dotted numbers but no IPv4 address"
    >>> host_problem("a b", show=False)
    'it is no IPv4 address, [IPv6] address or host name (letters, digits, - and _, in dot-separated labels)'
    """
    if not isinstance(text, str):
        return f"it is {type(text).__name__}, not text"
    if not text:
        return "it is empty"
    if len(text) > MAX_HOST + 2:
        return f"it is {len(text):,} characters long; a host name is at most {MAX_HOST}"
    quoted = f"{short_repr(text)} is" if show else "it is"
    if text.startswith("[") and text.endswith("]"):
        try:
            ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            return f"{quoted} in brackets but no IPv6 address"
        return None
    labels = (text[:-1] if text.endswith(".") else text).split(".")  # a name may end in the root's dot
    if all(p.isascii() and p.isdigit() for p in labels):
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            return f"{quoted} dotted numbers but no IPv4 address"
        return None
    if len(text) > MAX_HOST or not all(_LABEL.fullmatch(p) for p in labels):
        return f"{quoted} no IPv4 address, [IPv6] address or host name ({_NAME_RULE})"
    return None


def port_problem(text: object, low: int = 1, high: int = 65535, *, show: bool = True) -> str | None:
    """What is wrong with ``text`` (digits, or an ``int``) as a port in ``low..high`` (``None``: nothing).

    >>> port_problem("2222"), port_problem(0, low=0)
    (None, None)
    >>> port_problem("22x"), port_problem("70000", show=False)
    ("its port '22x' is not 1 to 5 digits", 'its port is not in 1..65535')
    """
    quoted = f"its port {short_repr(text)}" if show else "its port"
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        return f"its port is {type(text).__name__}, not a number"
    if isinstance(text, str):
        if not text:
            return "it has no port"
        if not (text.isascii() and text.isdigit() and len(text) <= 5):
            return f"{quoted} is not 1 to 5 digits"
        text = int(text)
    if not low <= text <= high:
        return f"{f'its port {text}' if show else 'its port'} is not in {low}..{high}"
    return None


def parse_host_port(
    text: object,
    asked: str,
    *,
    default_host: str | None = None,
    low: int = 1,
    hint: str = "",
    error: type[InputError] = LaunchError,
    show: bool = True,
) -> HostPort:
    """``HOST:PORT`` (or, with ``default_host``, ``[HOST:]PORT``) as a :class:`HostPort` (pure; bounded).

    Args:
        text: what was given.
        asked: how the message names it (``--metrics '9100x'``; from the environment, its name alone).
        default_host: the host of a bare ``PORT`` (``None``: a host is required).
        low: the lowest port (0: any free port).
        hint: how to fix it (default: the form, with an example).
        error: the error raised (:class:`~tfdevices.core.errors.LaunchError` by default).
        show: the message may quote parts of ``text`` (``False`` for a value from the environment).

    Raises:
        InputError: (``error``) not the form, with what is wrong with it.
    """
    form = "[HOST:]PORT" if default_host is not None else "HOST:PORT"
    hint = hint or f"write HOST:PORT, e.g. 10.0.0.5:2222{', or PORT alone' if default_host is not None else ''}."
    problem, address = _split(text, default_host, low, show)
    if problem is not None:
        raise error(f"{asked}: not {form}: {problem}.", hint=hint)
    assert address is not None
    return address


def address_problem(text: object, *, default_host: str | None = None, low: int = 1, show: bool = True) -> str | None:
    """What is wrong with ``text`` as ``HOST:PORT`` (``None``: nothing), for a caller with a message of its own.

    >>> address_problem("node7:2222"), address_problem("node7", show=False)
    (None, "it has no ':PORT'")
    """
    return _split(text, default_host, low, show)[0]


def _split(text: object, default_host: str | None, low: int, show: bool) -> tuple[str | None, HostPort | None]:
    if not isinstance(text, str):
        return f"it is {type(text).__name__}, not text", None
    if len(text) > MAX_ADDRESS:
        return f"it is {len(text):,} characters long; an address is at most {MAX_ADDRESS}", None
    host, sep, port = text.strip().rpartition(":")
    if not host and default_host is not None:  # PORT, or :PORT
        host = default_host
    elif not sep:
        return "it has no ':PORT'", None
    problem = port_problem(port, low, show=show) or host_problem(host, show=show)
    if problem is not None:
        return problem, None
    if host.startswith("["):
        host = host[1:-1]
    return None, HostPort(host, int(port))


def check_host(text: object, asked: str, *, hint: str, error: type[InputError] = LaunchError, show: bool = True) -> str:
    """``text``, checked as a host (see :func:`host_problem`; pure).

    >>> check_host("node7", "--master-addr 'node7'", hint="name node 0.")
    'node7'

    Raises:
        InputError: (``error``) not a host, with why.
    """
    problem = host_problem(text, show=show)
    if problem is not None:
        raise error(f"{asked}: not a host: {problem}.", hint=hint)
    assert isinstance(text, str)
    return text


def check_port(
    value: object, asked: str, *, low: int = 1, high: int = 65535, hint: str, error: type[InputError] = LaunchError
) -> int:
    """``value`` (an ``int``, or ASCII digits), checked as a port in ``low..high`` (pure).

    >>> check_port(29400, "--master-port 29400", hint="e.g. --master-port 29400.")
    29400
    >>> check_port(0, "--master-port 0", hint="e.g. --master-port 29400.")
    Traceback (most recent call last):
    ...
    tfdevices.core.errors.LaunchError: --master-port 0: not a port in 1..65535. HINT: e.g. --master-port 29400.

    Raises:
        InputError: (``error``) not a whole number in ``low..high``.
    """
    if port_problem(value, low, high) is not None or not isinstance(value, (int, str)):
        raise error(f"{asked}: not a port in {low}..{high}.", hint=hint)
    return int(value)


def ipv4_problem(text: object) -> str | None:
    """What keeps ``text`` from being an IPv4 address in dotted form (``None``: nothing; bounded).

    >>> ipv4_problem("10.0.0.5"), ipv4_problem("localhost")
    (None, 'not an IPv4 address')
    """
    if not isinstance(text, str) or not 7 <= len(text) <= 15:
        return "not an IPv4 address"
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return "not an IPv4 address"
    return None


def is_loopback(address: str) -> bool:
    """Whether ``address``, an IPv4 address already checked (:func:`ipv4_problem`), is a loopback one (127.0.0.0/8).

    >>> is_loopback("127.0.1.1"), is_loopback("10.0.0.5")
    (True, False)
    """
    return ipaddress.IPv4Address(address).is_loopback


def split_address(address: str) -> tuple[str, int]:
    """An address already checked as ``HOST:PORT`` (a cluster's, a rendezvous reply's) as its host and port.

    >>> split_address("10.0.0.5:2222"), split_address("[::1]:2222")
    (('10.0.0.5', 2222), ('::1', 2222))
    """
    host, _, port = address.rpartition(":")
    return (host[1:-1] if host.startswith("[") else host), int(port)
