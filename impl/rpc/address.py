"""The one parser of "HOST:PORT", for servers, the client and the CLI alike.

A server is named by the string ``"HOST:PORT"`` (``"[::1]:7050"`` for an IPv6 literal): the
form users type, the form tablet servers put in their Raft configurations (Peer.address) and
in NotLeader hints, and the form of ``--rpc-bind``. Every part of impl parses it here, so one
string means the same server everywhere and a bad one is refused with the same words.

Rules (each refusal is a BadAddress, a ValueError, naming the input and the reason):

* not empty, no whitespace anywhere;
* ``HOST:PORT`` with a non-empty HOST that has no ``:`` of its own, or ``[IPV6]:PORT`` (the
  brackets are how a host containing ``:`` is written; the host returned has none);
* PORT is ASCII digits in 1..65535; 0 ("any free port") only with ``allow_any_port=True``,
  which a bind address allows and a peer's address never does (nobody can connect to it).

Host names are not resolved and IP literals are not validated: what a host means is the
Network's business (a DNS name or IP for TCP, a node name for a MemoryNetwork).
"""

from __future__ import annotations


class BadAddress(ValueError):
    """`address` is not a usable "HOST:PORT"; `reason` says why."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"invalid address {address!r}: {reason}")
        self.address = address
        self.reason = reason


def parse_address(address: str, *, allow_any_port: bool = False) -> tuple[str, int]:
    """(host, port) of ``"HOST:PORT"`` or ``"[IPV6]:PORT"``; BadAddress naming the problem.

    ``allow_any_port``: accept port 0 (a bind address: the network picks a free port)."""
    if not isinstance(address, str) or not address:
        raise BadAddress(str(address), "empty; expected HOST:PORT")
    if any(c.isspace() for c in address):
        raise BadAddress(address, "contains whitespace; expected HOST:PORT")
    if address.startswith("["):
        close = address.find("]")
        if close < 0 or address[close + 1:close + 2] != ":":
            raise BadAddress(address, "expected [IPV6]:PORT")
        host, port_text = address[1:close], address[close + 2:]
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise BadAddress(address, "no port; expected HOST:PORT")
        if ":" in host:
            raise BadAddress(address, "an IPv6 host must be in brackets: [HOST]:PORT")
    if not host:
        raise BadAddress(address, "no host; expected HOST:PORT")
    # isdigit() alone accepts non-ASCII digits ("٧٠٥٠"), which int() would then read.
    if not port_text.isascii() or not port_text.isdigit():
        raise BadAddress(address, f"port {port_text!r} is not a number")
    port = int(port_text)
    lowest = 0 if allow_any_port else 1
    if not lowest <= port <= 65535:
        raise BadAddress(address, f"port {port} outside {lowest}..65535")
    assert host, address
    return host, port


def format_address(host: str, port: int) -> str:
    """The inverse of parse_address: ``"HOST:PORT"``, an IPv6 host in brackets."""
    if not host or any(c.isspace() for c in host) or "[" in host or "]" in host:
        raise BadAddress(f"{host}:{port}", f"host {host!r} cannot be written in an address")
    if not 0 <= port <= 65535:
        raise BadAddress(f"{host}:{port}", f"port {port} outside 0..65535")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_address(address: str | None) -> bool:
    """Whether ``address`` is a usable "HOST:PORT" (`parse_address` accepts it): for a hint
    or a list a server sent, where a bad entry is skipped rather than an error."""
    if not address:
        return False
    try:
        parse_address(address)
    except BadAddress:
        return False
    return True


__all__ = ["BadAddress", "format_address", "is_address", "parse_address"]
