"""Addresses and the retry policy of the client library.

Addresses
---------
A server is named by the string ``"HOST:PORT"`` (``"[::1]:7050"`` for an IPv6 literal): the
form users type, the form tablet servers put in their Raft configurations (Peer.address) and
in NotLeader hints, so one string identifies a server everywhere. `parse_address` checks it
with the one parser every part of impl uses (revivify.impl.rpc.address) and raises the
client's InvalidAddress (a ClientError) naming what is wrong.

Retries
-------
A call routed to a tablet's leader is retried when the failure says "not here, not now"
(NotLeader, TabletNotRunning, OperationAborted, a lost connection, a server shutting down)
and never otherwise. Attempt n (1-based) that fails waits

    base(n) = min(max, initial * multiplier ** (n - 1))
    sleep(n) = base(n) / 2 + uniform(0, base(n) / 2)        ("equal jitter")

before attempt n + 1 (ClientOptions.backoff, a revivify.impl.rpc.Backoff, the schedule the
servers use too): at least half the base (clients back off for real) and at most the base
(never above max), the jitter drawn from an injected random.Random so tests are
deterministic and many clients do not retry in lockstep. A NotLeader that names a
leader the client has not just tried is followed at once, without sleeping (it still counts
as an attempt, so two servers pointing at each other cannot loop for ever).

An operation gives up, raising an Unavailable subclass that names its last error, after
`max_attempts` attempts or at its deadline, ``trio.current_time() + deadline`` taken when
the operation starts, whichever comes first. The deadline is enforced with a trio cancel
scope, so it also bounds a call that hangs. There are no timeout parameters: a caller
wanting less wraps the call in ``trio.move_on_after`` / ``trio.fail_after`` as usual.

The deadline guarantee
----------------------
Every public operation (TabletClient, TableClient, MasterClient, and the CLI commands built
on them) ends by its deadline plus at most ``DEADLINE_SLACK`` (0.25 s): it returns, or
raises DeadlineExceeded naming the operation and its last error (a stalled server, no
leader, the masters silent while its locations were asked for). The slack is not work
done after the deadline, only the unwinding of cancelled calls and the scheduling delay of
a loaded machine; under trio's MockClock an operation ends exactly at its deadline.

One absolute deadline (``trio.current_time()`` units) is taken when the operation starts
and is threaded, as the ``deadline`` argument of the inner calls, through everything the
operation does: every retry, every page of a scan, the leader-info read of a config change
without an index, every location refresh a table operation makes through the masters, and
every connect, handshake and call (each also bounded by the call timeout). An inner call
given a deadline never takes a fresh one of its own (issue 32: a put with a 5 s deadline
took 9.18 s, the location refresh after a failed try having got a new 5 s). `deadline_at`
is the one rule: the caller's deadline if given, else now + ``ClientOptions.deadline``,
and never later than either.

The call timeout
----------------
Inside an operation, each single RPC (a leader-discovery question, the call to the leader,
with its connect and UUID handshake) is bounded by `call_timeout` (default 2 s): a server
that accepts connections but never answers (SIGSTOPped, cut off without a reset, its disk
hung) costs one call timeout, not the whole deadline; the call counts as a failed attempt
(NoAnswer, retryable) and the leader is looked for again, among all servers at once.
Why 2 s: a few times the servers' election timeout (``--tick-ms 50 --election-ticks 10``:
0.5 s, randomised up to 1 s), so by the time a call to a stalled leader times out the others
have usually elected a new one and the next attempt finds it; and long enough that a healthy
leader's answer (a write's group-commit fsync and majority round, a read's ReadIndex round)
is not cut off on a loaded machine. A cut-off write is no harm to exactly-once (the retry
re-sends the same (client_id, seq)), but it may leave the outcome unknown if the operation
then gives up. With one server stalled, an operation should so finish within about one call
timeout plus twice the election timeout.
"""

from __future__ import annotations

import math

import attrs
import trio

from revivify.impl.rpc.address import BadAddress
from revivify.impl.rpc.address import parse_address as parse_rpc_address
from revivify.impl.rpc.backoff import Backoff

from .errors import InvalidAddress


def parse_address(address: str) -> tuple[str, int]:
    """(host, port) of ``"HOST:PORT"``; InvalidAddress naming what is wrong."""
    try:
        return parse_rpc_address(address)
    except BadAddress as exc:
        raise InvalidAddress(exc.address, exc.reason) from None


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _at_least_one(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value!r}")


DEADLINE_SLACK = 0.25
"""Seconds past its deadline by which a client operation has ended ("The deadline
guarantee" in the module docstring; the CLI's own backstop allows the same)."""

DEFAULT_CALL_TIMEOUT = 2.0
"""Seconds one RPC may take before the client moves on (module docstring)."""

# Equal jitter: a delay is in [base / 2, base].
DEFAULT_BACKOFF = Backoff(initial=0.05, max=1.0, multiplier=2.0, jitter=0.5)


@attrs.frozen
class ClientOptions:
    """How hard the client tries (see the module docstring)."""

    max_attempts: int = attrs.field(default=12, validator=_at_least_one)
    deadline: float = attrs.field(default=30.0, validator=_positive)  # seconds per operation
    # seconds per RPC inside an operation (see "The call timeout" above)
    call_timeout: float = attrs.field(default=DEFAULT_CALL_TIMEOUT, validator=_positive)
    backoff: Backoff = DEFAULT_BACKOFF  # the delay after each failed attempt
    scan_page_size: int = attrs.field(default=1000, validator=_at_least_one)


def deadline_at(options: ClientOptions, deadline: float | None = None) -> float:
    """The absolute trio time an operation must end by ("The deadline guarantee"):
    ``deadline`` (an enclosing operation's) when given, capped at now plus the options'
    deadline; else now plus the options' deadline."""
    own = trio.current_time() + options.deadline
    if deadline is None or math.isnan(deadline):
        return own
    return min(deadline, own)


__all__ = ["DEADLINE_SLACK", "DEFAULT_BACKOFF", "DEFAULT_CALL_TIMEOUT", "ClientOptions",
           "deadline_at", "parse_address"]
