"""The one HOST:PORT parser (revivify.impl.rpc.address): what it accepts, what it refuses
and with which words, and that format_address is its inverse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from revivify.impl.rpc import BadAddress, format_address, parse_address


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:7050", ("127.0.0.1", 7050)),
    ("ts-1:1", ("ts-1", 1)),
    ("localhost:65535", ("localhost", 65535)),
    ("[::1]:7050", ("::1", 7050)),
    ("[fe80::1%eth0]:80", ("fe80::1%eth0", 80)),
    ("h:007", ("h", 7)),
])
def test_parses(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address, reason", [
    ("", "empty; expected HOST:PORT"),
    ("host", "no port; expected HOST:PORT"),
    (":7050", "no host; expected HOST:PORT"),
    ("[]:7050", "no host; expected HOST:PORT"),
    ("h:", "port '' is not a number"),
    ("h:x", "port 'x' is not a number"),
    ("h:-1", "port '-1' is not a number"),
    ("h:\u0667\u0660", "port '\u0667\u0660' is not a number"),  # Arabic-Indic digits
    ("h:0", "port 0 outside 1..65535"),
    ("h:65536", "port 65536 outside 1..65535"),
    ("::1:7050", "an IPv6 host must be in brackets: [HOST]:PORT"),
    ("h :1", "contains whitespace; expected HOST:PORT"),
    ("h:1\n", "contains whitespace; expected HOST:PORT"),
    ("[::1]7050", "expected [IPV6]:PORT"),
    ("[::1", "expected [IPV6]:PORT"),
])
def test_refuses_naming_the_input_and_the_reason(address: str, reason: str) -> None:
    with pytest.raises(BadAddress) as caught:
        parse_address(address)
    assert caught.value.address == address
    assert caught.value.reason == reason
    assert str(caught.value) == f"invalid address {address!r}: {reason}"


def test_a_bad_address_is_a_value_error() -> None:
    """Callers that catch ValueError (argparse types, older code) keep working."""
    with pytest.raises(ValueError, match="invalid address 'nope'"):
        parse_address("nope")


def test_port_zero_only_for_a_bind_address() -> None:
    assert parse_address("0.0.0.0:0", allow_any_port=True) == ("0.0.0.0", 0)
    assert parse_address("[::]:0", allow_any_port=True) == ("::", 0)
    with pytest.raises(BadAddress, match=r"port 0 outside 1\.\.65535"):
        parse_address("0.0.0.0:0")
    with pytest.raises(BadAddress, match=r"port 65536 outside 0\.\.65535"):
        parse_address("h:65536", allow_any_port=True)


def test_format_address() -> None:
    assert format_address("127.0.0.1", 7050) == "127.0.0.1:7050"
    assert format_address("::1", 7050) == "[::1]:7050"
    for host, port in (("", 1), ("a b", 1), ("[x]", 1), ("h", -1), ("h", 65536)):
        with pytest.raises(BadAddress):
            format_address(host, port)


hosts = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True),
    st.ip_addresses().map(str),
)


@given(hosts, st.integers(1, 65535))
def test_format_then_parse_is_the_identity(host: str, port: int) -> None:
    assert parse_address(format_address(host, port)) == (host, port)


@given(st.text(max_size=30))
def test_any_text_parses_or_is_refused_with_bad_address(text: str) -> None:
    try:
        host, port = parse_address(text)
    except BadAddress as exc:
        assert exc.address == text
        return
    assert host and 1 <= port <= 65535
    assert parse_address(format_address(host, port)) == (host, port)
