"""The one address parser (tfdevices/core/addresses.py), fuzzed: it returns a checked address or raises its
one error, never another; what it accepts is what Python's ``ipaddress`` and DNS's label rules accept; an
address it writes reads back the same; and a value from the environment is never repeated in a message.
"""

from __future__ import annotations

import ast
import ipaddress
import pathlib
import re

import pytest
from hypothesis import given, settings, strategies as st

from tfdevices.core.addresses import (
    MAX_ADDRESS,
    MAX_HOST,
    HostPort,
    check_host,
    check_port,
    host_problem,
    ipv4_problem,
    is_loopback,
    parse_host_port,
    split_address,
)
from tfdevices.core.errors import LaunchError, TfConfigError

_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_SENTINEL = "QzQ"  # in no fixed text of a message

labels = st.from_regex(_LABEL, fullmatch=True).filter(lambda s: not s.isdigit())
names = st.lists(labels, min_size=1, max_size=4).map(".".join).filter(lambda s: len(s) <= MAX_HOST)
ipv4s = st.ip_addresses(v=4).map(str)
ipv6s = st.ip_addresses(v=6).map(lambda a: f"[{a}]")
hosts = st.one_of(names, ipv4s, ipv6s)
ports = st.integers(1, 65535)
# text near the form: pieces of addresses, separators, digits, non-ASCII digits and letters, space
near = st.lists(
    st.one_of(hosts, ports.map(str), st.sampled_from([":", "[", "]", ".", "-", " ", "\u0662", "\uff12", "é", "0"])),
    max_size=6,
).map("".join)
anything = st.one_of(near, st.text(max_size=300), st.integers(), st.none(), st.binary(max_size=8))


def _accepted_host(host: str) -> bool:
    """The rule, said another way: what ``ipaddress`` takes, or ASCII labels of DNS's form, not all digits."""
    for kind in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        try:
            kind(host)
            return True
        except ValueError:
            pass
    parts = host.split(".")
    return len(host) <= MAX_HOST and not all(p.isdigit() for p in parts) and all(_LABEL.fullmatch(p) for p in parts)


@settings(max_examples=400, deadline=None)
@given(anything)
def test_any_input_gives_a_checked_address_or_one_line_error(text: object) -> None:
    try:
        got = parse_host_port(text, "--x", default_host="127.0.0.1", low=0)
    except LaunchError as err:
        assert "\n" not in str(err) and str(err).startswith("--x: not [HOST:]PORT: ") and err.hint
        return
    assert isinstance(text, str) and len(text) <= MAX_ADDRESS
    assert isinstance(got, HostPort) and 0 <= got.port <= 65535
    assert _accepted_host(got.host), got
    assert got.port == int(text.strip().rpartition(":")[2])


@settings(max_examples=300, deadline=None)
@given(hosts, ports)
def test_an_address_written_reads_back_the_same(host: str, port: int) -> None:
    got = parse_host_port(f"{host}:{port}", "--x")
    assert str(got) == f"{host}:{port}"
    assert split_address(str(got)) == (got.host, port)
    assert check_host(host, "--x", hint="h") == host
    assert check_port(port, "--x", hint="h") == port == check_port(str(port), "--x", hint="h")


@settings(max_examples=300, deadline=None)
@given(st.one_of(near, st.text(max_size=40)), st.integers(0, 6))
def test_a_value_from_the_environment_is_never_repeated(text: str, at: int) -> None:
    text = text[:at] + _SENTINEL + text[at:]
    try:
        parse_host_port(text, "TF_CONFIG: cluster address worker[0]", error=TfConfigError, show=False)
    except TfConfigError as err:
        assert _SENTINEL not in str(err)
    assert _SENTINEL not in (host_problem(text, show=False) or "")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "it has no ':PORT'"),
        ("node7", "it has no ':PORT'"),
        ("node7:", "it has no port"),
        (":2222", "it is empty"),
        ("node7:0", "its port 0 is not in 1..65535"),
        ("node7:65536", "its port 65536 is not in 1..65535"),
        ("node7:\u0662\u0662", "its port '\u0662\u0662' is not 1 to 5 digits"),
        ("node7:022222", "its port '022222' is not 1 to 5 digits"),
        ("999.1.1.1:2222", "'999.1.1.1' is dotted numbers but no IPv4 address"),
        ("[::g]:2222", "'[::g]' is in brackets but no IPv6 address"),
        ("a b:2222", "'a b' is no IPv4 address, [IPv6] address or host name"),
        ("-a:2222", "'-a' is no IPv4 address"),
        ("a..b:2222", "'a..b' is no IPv4 address"),
        ("x" * 64 + ":2222", f"'{'x' * 64}' is no IPv4 address"),
        ("x" * (MAX_ADDRESS + 1), f"it is {MAX_ADDRESS + 1:,} characters long; an address is at most {MAX_ADDRESS}"),
        (2222, "it is int, not text"),
    ],
)
def test_each_problem_is_named(text: object, problem: str) -> None:
    with pytest.raises(LaunchError) as caught:
        parse_host_port(text, "--master", hint="name node 0.")
    assert f"--master: not HOST:PORT: {problem}" in str(caught.value)
    assert str(caught.value).endswith("HINT: name node 0.")


def test_a_bare_port_takes_the_default_host_and_port_0_is_allowed_where_asked() -> None:
    assert parse_host_port(" 9100 ", "--m", default_host="127.0.0.1") == HostPort("127.0.0.1", 9100)
    assert parse_host_port("0.0.0.0:0", "--m", default_host="127.0.0.1", low=0) == HostPort("0.0.0.0", 0)
    assert parse_host_port("[::1]:2222", "--m") == HostPort("::1", 2222)
    with pytest.raises(LaunchError, match=r"--m: not \[HOST:\]PORT: its port 0 is not in 1..65535"):
        parse_host_port("0", "--m", default_host="127.0.0.1")


def test_ports_hosts_and_ipv4_alone() -> None:
    for bad in (0, 65536, True, "2x", 2.0, None):
        with pytest.raises(LaunchError, match=r"--master-port .*: not a port in 1..65535\. HINT: e.g. 29400\."):
            check_port(bad, f"--master-port {bad!r}", hint="e.g. 29400.")
    with pytest.raises(LaunchError, match=r"--master-addr '': not a host: it is empty\. HINT: name node 0\."):
        check_host("", "--master-addr ''", hint="name node 0.")
    assert [is_loopback(t) for t in ("127.0.0.1", "127.255.0.3", "128.0.0.1")] == [True, True, False]
    assert [ipv4_problem(t) for t in ("10.0.0.5", "10.0.0", "::1", "x" * 10**6, 7)] == [None] + [
        "not an IPv4 address"
    ] * 4


# ------------------------------------------------------------------ architecture, rule 14: one address parser

_PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "tfdevices"
_WHERE_ADDRESSES_ARE = ("jobs", "mends", "gpus", "core", "strategy.py", "runtime.py")


def _address_parsing(path: pathlib.Path) -> list[int]:
    """Lines where ``path`` splits ``HOST:PORT`` itself or reads an IP address with ``ipaddress``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            colon = [a for a in node.args if isinstance(a, ast.Constant) and a.value == ":"]
            if node.func.attr in ("rpartition", "rsplit") and colon:
                lines.append(node.lineno)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ipaddress":
            lines.append(node.lineno)
    return lines


def test_one_address_parser_in_the_package(tmp_path) -> None:
    """Architecture, rule 14: ``HOST:PORT`` and IP addresses are read by core/addresses.py alone."""
    sample = tmp_path / "sample.py"
    sample.write_text('import ipaddress\nhost, _, port = text.rpartition(":")\nipaddress.IPv4Address(host)\n')
    assert _address_parsing(sample) == [2, 3]  # the reader finds both kinds of parsing by hand
    found = {}
    for part in _WHERE_ADDRESSES_ARE:
        for path in sorted((_PACKAGE / part).rglob("*.py")) if (_PACKAGE / part).is_dir() else [_PACKAGE / part]:
            name = path.relative_to(_PACKAGE).as_posix()
            if name != "core/addresses.py" and _address_parsing(path):
                found[name] = _address_parsing(path)
    assert found == {}, f"parse addresses with tfdevices.core.addresses, not by hand: {found}"
