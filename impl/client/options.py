"""Addresses and the retry policy of the client library.

Addresses
---------
A server is named by the string ``"HOST:PORT"`` (``"[::1]:7050"`` for an IPv6 literal): the
form users type, the form tablet servers put in their Raft configurations (Peer.address) and
in NotLeader hints, so one string identifies a server everywhere. `parse_address` checks it
(InvalidAddress otherwise).

Retries
-------
A call routed to a tablet's leader is retried when the failure says "not here, not now"
(NotLeader, TabletNotRunning, OperationAborted, a lost connection, a server shutting down)
and never otherwise. Attempt n (1-based) that fails waits

    base(n) = min(max_backoff, initial_backoff * multiplier ** (n - 1))
    sleep(n) = base(n) / 2 + uniform(0, base(n) / 2)        ("equal jitter")

before attempt n + 1: at least half the base (clients back off for real) and at most the
base (never above max_backoff), the jitter drawn from an injected random.Random so tests
are deterministic and many clients do not retry in lockstep. A NotLeader that names a
leader the client has not just tried is followed at once, without sleeping (it still counts
as an attempt, so two servers pointing at each other cannot loop for ever).

An operation gives up, raising an Unavailable subclass that names its last error, after
`max_attempts` attempts or at its deadline, ``trio.current_time() + deadline`` taken when
the operation starts, whichever comes first. The deadline is enforced with a trio cancel
scope, so it also bounds a call that hangs. There are no timeout parameters: a caller
wanting less wraps the call in ``trio.move_on_after`` / ``trio.fail_after`` as usual.
"""

from __future__ import annotations

import random

import attrs

from .errors import InvalidAddress


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of ``"HOST:PORT"``; InvalidAddress naming what is wrong."""
    if not isinstance(address, str) or not address:
        raise InvalidAddress(str(address), "empty; expected HOST:PORT")
    if any(c.isspace() for c in address):
        raise InvalidAddress(address, "contains whitespace; expected HOST:PORT")
    if address.startswith("["):
        close = address.find("]")
        if close < 0 or address[close + 1:close + 2] != ":":
            raise InvalidAddress(address, "expected [IPV6]:PORT")
        host, port_text = address[1:close], address[close + 2:]
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise InvalidAddress(address, "no port; expected HOST:PORT")
        if ":" in host:
            raise InvalidAddress(address, "an IPv6 host must be in brackets: [HOST]:PORT")
    if not host:
        raise InvalidAddress(address, "no host; expected HOST:PORT")
    if not port_text.isdigit() or not port_text.isascii():
        raise InvalidAddress(address, f"port {port_text!r} is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise InvalidAddress(address, f"port {port} outside 1..65535")
    return host, port


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _at_least_one(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value!r}")


@attrs.frozen
class ClientOptions:
    """How hard the client tries (see the module docstring)."""

    max_attempts: int = attrs.field(default=12, validator=_at_least_one)
    deadline: float = attrs.field(default=30.0, validator=_positive)  # seconds per operation
    initial_backoff: float = attrs.field(default=0.05, validator=_positive)
    max_backoff: float = attrs.field(default=1.0, validator=_positive)
    multiplier: float = attrs.field(default=2.0, validator=_positive)
    scan_page_size: int = attrs.field(default=1000, validator=_at_least_one)

    def backoff_base(self, attempt: int) -> float:
        """The base delay after failed attempt `attempt` (1-based)."""
        exponent = min(max(attempt - 1, 0), 64)  # beyond 2**64 the cap has long applied
        return min(self.max_backoff, self.initial_backoff * self.multiplier ** exponent)

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The jittered delay after failed attempt `attempt`: in [base / 2, base]."""
        base = self.backoff_base(attempt)
        return base / 2 + rng.uniform(0, base / 2)


__all__ = ["ClientOptions", "parse_address"]
