"""The errors of the client library: what went wrong, in words and in fields.

Every error the library raises on purpose is a ClientError. The RPC layer's errors and the
tablet server's AppErrors never escape a public call raw: the library either handles them
(retries, follows a leader hint, reconnects) or wraps them in one of these, keeping the
server's error as ``last_error`` so nothing is lost.

    ClientError(message, last_error)
    ├── InvalidRequest(detail)                   refused before anything was sent (a bad
    │   └── InvalidAddress(address, reason)      "HOST:PORT", a batch over the limits, ...)
    ├── ServerUnreachable(address, reason)       one server could not be reached (admin
    │   │                                        calls that address one server)
    │   └── NoAnswer(address, seconds, maybe_sent)  it did not answer within the call
    │                                            timeout (options.py): stalled, cut off;
    │                                            retried like a lost connection
    ├── Rejected(address, error)                 a server refused for good: retrying the same
    │                                            request cannot help (InvalidArgument,
    │                                            TabletAlreadyExists, an internal error, ...)
    ├── TabletNotFoundError(tablet_id, asked)    every server that answered said it does not
    │                                            host the tablet
    ├── ChangeRefused(reason, detail, committed_index, outcome_unknown)
    │                                            the leader said no to a config change (a
    │                                            stale compare-and-set index, ...)
    ├── NoLeader(tablet_id, errors)              one pass over the servers found no leader
    │   │                                        (retried; seen only as a last_error)
    │   └── NoMasterAnswered(reasons)            ...and not one master answered at all
    ├── TabletNotRunningError(tablet_id, partition, state)
    │                                            the masters hold the tablet of a bucket
    │                                            not RUNNING yet (CREATING: no leader
    │                                            reported), so they give no locations for
    │                                            it (retried; seen only as a last_error)
    └── Unavailable(operation, attempts, last_error, outcome_unknown)
        ├── RetriesExhausted                     the bounded number of attempts is spent
        ├── DeadlineExceeded                     the operation's deadline passed
        │   └── MastersUnreachable               ...and no master answered to the end: said
        │                                        in an operator's words (which addresses,
        │                                        refused or silent), no internal name
        └── OutcomeUnknown                       a call that must not be repeated was cut off
                                                 in flight (step-down): it may have run

``outcome_unknown`` is True when an attempt may have been applied before the library gave
up (a connection closed with the call in flight, a call that got no answer within the call
timeout after it was sent, or OperationAborted): a write is then applied at most once, but
maybe once. `outcome_of` says it in one word for a write that failed: "unknown" (it may or
may not have been applied) or "failed" (it was not: refused before it was sent, refused by
the leader, never sent to a server that could have applied it).
"""

from __future__ import annotations

from collections.abc import Sequence


def _one_line(text: str) -> str:
    return " ".join(text.split())


class ClientError(Exception):
    """Base of every error the client library raises on purpose."""

    def __init__(self, message: str, last_error: BaseException | None = None) -> None:
        super().__init__(_one_line(message))
        self.message = _one_line(message)
        self.last_error = last_error


class InvalidRequest(ClientError, ValueError):
    """The request was refused locally, before anything was sent."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidAddress(InvalidRequest):
    """`address` is not a usable "HOST:PORT"."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"invalid address {address!r}: {reason}")
        self.address = address
        self.reason = reason


class ServerUnreachable(ClientError):
    """The server at `address` could not be reached (or the connection broke mid-call)."""

    def __init__(self, address: str, reason: str, last_error: BaseException | None = None
                 ) -> None:
        super().__init__(f"cannot reach {address}: {reason}", last_error)
        self.address = address
        self.reason = reason


class NoAnswer(ServerUnreachable):
    """The server at `address` did not answer one call within `seconds` (the call timeout).

    `maybe_sent`: the request may have left (a connection to the server was open when the
    time ran out), so a write may still be applied there; False when the time ran out
    while connecting or in the UUID handshake, before anything was sent.
    """

    def __init__(self, address: str, seconds: float, *, maybe_sent: bool) -> None:
        super().__init__(address, f"no answer within {seconds:g}s")
        self.seconds = seconds
        self.maybe_sent = maybe_sent


class Rejected(ClientError):
    """The server at `address` refused the request with `error`; retrying cannot help."""

    def __init__(self, address: str, error: BaseException) -> None:
        super().__init__(f"{address} refused: {error}", error)
        self.address = address
        self.error = error


class WrongServerKind(ClientError):
    """The server at `address` is a `actual` ("tablet server" or "master"), not the
    `expected` one the command was pointed at: a wrong address, said at once (retrying
    cannot help)."""

    def __init__(self, address: str, actual: str, expected: str) -> None:
        super().__init__(f"{address} is a {actual}, not a {expected}")
        self.address = address
        self.actual = actual
        self.expected = expected


class TabletNotFoundError(ClientError):
    """Every server that answered (`asked`) said it does not host `tablet_id`."""

    def __init__(self, tablet_id: str, asked: Sequence[str]) -> None:
        super().__init__(f"tablet {tablet_id} is not hosted by any of {', '.join(asked)}")
        self.tablet_id = tablet_id
        self.asked = tuple(asked)


class TabletUnknownToMasters(ClientError):
    """No table of the masters' catalog (`tables` of them) holds `tablet_id`: a definite
    "no such tablet" (the tablet commands' exit 1), not an unreachable cluster."""

    def __init__(self, tablet_id: str, tables: int) -> None:
        super().__init__(f"the masters know no tablet {tablet_id} (none of the catalog's "
                         f"{tables} table{'s' if tables != 1 else ''} has it)")
        self.tablet_id = tablet_id
        self.tables = tables


class ChangeRefused(ClientError):
    """The leader refused a config change (its ConfigChangeRefused, as fields)."""

    def __init__(self, reason: str, detail: str, committed_index: int, *,
                 outcome_unknown: bool = False, last_error: BaseException | None = None
                 ) -> None:
        note = (" (an earlier attempt was cut off in flight and may have been applied)"
                if outcome_unknown else "")
        super().__init__(f"config change refused ({reason}): {detail}{note}", last_error)
        self.reason = reason
        self.detail = detail
        self.committed_index = committed_index
        self.outcome_unknown = outcome_unknown


class NoLeader(ClientError):
    """A pass over every known server found no leader; `errors` says what each answered."""

    def __init__(self, tablet_id: str, errors: Sequence[tuple[str, str]], *,
                 subject: str = "") -> None:
        said = "; ".join(f"{address}: {what}" for address, what in errors) or "no server"
        subject = subject or f"for tablet {tablet_id}"
        super().__init__(f"no leader found {subject} ({said})")
        self.tablet_id = tablet_id
        self.errors = tuple(errors)


class NoMasterAnswered(NoLeader):
    """A round of Master.Status found no master at all: ``reasons`` maps each address asked
    to why it gave no answer, in operator words ("connection refused", "timed out after
    2s"): see `unreachable_reason`."""

    def __init__(self, reasons: Sequence[tuple[str, str]]) -> None:
        ClientError.__init__(self, masters_unreachable_text(reasons))
        self.tablet_id = ""
        self.errors = tuple(reasons)
        self.reasons = tuple(reasons)


def masters_unreachable_text(reasons: Sequence[tuple[str, str]]) -> str:
    """"no master answered at A, B, C (connection refused)": one reason when every master
    gave the same one, else each address with its own."""
    addresses = ", ".join(address for address, _ in reasons) or "no address"
    said = {why for _, why in reasons}
    why = (next(iter(said)) if len(said) == 1
           else "; ".join(f"{address}: {why}" for address, why in reasons))
    return f"no master answered at {addresses} ({why})"


def unreachable_reason(error: BaseException) -> str:
    """Why a server gave no answer, in an operator's words: "connection refused" (nothing
    listens there), "timed out after Ns" (silent: stopped, cut off, a wrong host), "no
    route to host", or the error's own text. The reason is looked for along the chain of
    causes (the RPC layer wraps the socket's error, trio groups one per address tried)."""
    seen: set[int] = set()
    stack: list[BaseException] = [error]
    while stack:
        exc = stack.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, NoAnswer):
            return f"timed out after {exc.seconds:g}s"
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused"
        if isinstance(exc, OSError) and exc.errno is not None:
            return exc.strerror.lower() if exc.strerror else str(exc)
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        for linked in (exc.__cause__, exc.__context__, getattr(exc, "last_error", None)):
            if isinstance(linked, BaseException):
                stack.append(linked)
    text = str(error)
    return text.split(": ", 1)[1] if text.startswith("cannot ") and ": " in text else text


class TabletNotRunningError(ClientError):
    """The masters hold `tablet_id` (bucket `partition`) in `state`, not RUNNING: no
    locations for it yet (impl/master/queries.py "Locations for writers")."""

    def __init__(self, tablet_id: str, partition: int, state: str) -> None:
        super().__init__(f"tablet {tablet_id} (bucket {partition}) is {state} in the "
                         f"catalog, not RUNNING yet: no leader has been reported for it, "
                         f"so the masters give no locations for it")
        self.tablet_id = tablet_id
        self.partition = partition
        self.state = state


class Unavailable(ClientError):
    """`operation` gave up after `attempts` attempts; `last_error` is why the last failed."""

    why = "gave up"

    def __init__(self, operation: str, attempts: int, last_error: BaseException | None, *,
                 outcome_unknown: bool = False) -> None:
        cause = f": {last_error}" if last_error is not None else ""
        note = "; it may or may not have been applied" if outcome_unknown else ""
        super().__init__(
            f"{operation}: {self.why} after {attempts} attempt{'s' if attempts != 1 else ''}"
            f"{note}{cause}", last_error)
        self.operation = operation
        self.attempts = attempts
        self.outcome_unknown = outcome_unknown


class RetriesExhausted(Unavailable):
    why = "no success"


class DeadlineExceeded(Unavailable):
    why = "out of time (deadline reached)"


class MastersUnreachable(DeadlineExceeded):
    """The deadline passed and no master answered at all in the last round: "no master
    answered at A, B, C (connection refused)", prefixed by ``operation`` when
    ``say_operation`` (a larger operation was under way: "get on table t"; a master
    client's own call is named by its RPC method, an internal name left out of the
    message). No internal name appears: an operator needs the addresses and what happened
    at them."""

    def __init__(self, operation: str, attempts: int, last_error: NoMasterAnswered, *,
                 outcome_unknown: bool = False, say_operation: bool = True) -> None:
        note = "; it may or may not have been applied" if outcome_unknown else ""
        prefix = f"{operation}: " if operation and say_operation else ""
        ClientError.__init__(self, f"{prefix}{last_error.message}{note}", last_error)
        self.operation = operation
        self.attempts = attempts
        self.outcome_unknown = outcome_unknown
        self.reasons = last_error.reasons


class OutcomeUnknown(Unavailable):
    why = "cut off in flight, not repeated"


OUTCOME_UNKNOWN = "unknown"
OUTCOME_FAILED = "failed"


def outcome_of(error: BaseException) -> str:
    """A failed write in one word: "unknown" if it may have been applied, else "failed"."""
    if isinstance(error, Unavailable | ChangeRefused) and error.outcome_unknown:
        return OUTCOME_UNKNOWN
    return OUTCOME_FAILED


__all__ = [
    "OUTCOME_FAILED",
    "OUTCOME_UNKNOWN",
    "ChangeRefused",
    "ClientError",
    "DeadlineExceeded",
    "InvalidAddress",
    "InvalidRequest",
    "MastersUnreachable",
    "NoAnswer",
    "NoLeader",
    "NoMasterAnswered",
    "OutcomeUnknown",
    "Rejected",
    "RetriesExhausted",
    "ServerUnreachable",
    "TabletNotFoundError",
    "TabletNotRunningError",
    "TabletUnknownToMasters",
    "Unavailable",
    "WrongServerKind",
    "masters_unreachable_text",
    "outcome_of",
    "unreachable_reason",
]
