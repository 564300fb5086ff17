"""The master core's typed refusals, and the one exception for a catalog that cannot be read.

A planner never raises for a request it refuses: it *returns* one of these values, so the
caller's ``match`` sees every outcome and a refusal can never be mistaken for a crash
(KUDU-495: nothing in the master aborts because an operation could not be done). The trio
shell maps each onto the RPC error the client receives; ``retryable`` says whether the client
should try again (the same request, later) or report the refusal to its user.

    MasterError                      (a value; the request is refused, nothing was written)
    +-- NotFound(kind, name)             no such table / tablet (REMOVED tables included)
    +-- AlreadyPresent(kind, name, id)   a table of that name exists (another request made it)
    +-- InvalidArgument(detail)          the request itself is wrong (schema, counts, names)
    +-- NameReserved(name)               a CreateTable or rename of that name is in flight:
    |                                    retryable (Kudu answers SERVICE_UNAVAILABLE here)
    +-- NotEnoughServers(needed, live)   fewer live tablet servers than the replica count
    +-- IllegalState(detail)             the records are not in a state the request allows

    CatalogCorrupt(key, reason)      (an exception) a catalog row that does not decode; the
                                     master must not serve from a catalog it cannot read
    NotCommitted(detail)             (an exception) a caller asked for a plan's RPCs with a
                                     catalog that does not hold the plan's write: a bug in
                                     the caller, never a refusal of a request
"""

from __future__ import annotations

from typing import Literal

import attrs

Kind = Literal["table", "tablet"]


@attrs.frozen
class MasterError:
    """Base of the refusals; ``retryable`` tells the client whether to try again."""

    @property
    def retryable(self) -> bool:
        return False

    @property
    def message(self) -> str:  # pragma: no cover - every subclass overrides it
        return type(self).__name__


@attrs.frozen
class NotFound(MasterError):
    kind: Kind
    name: str

    @property
    def message(self) -> str:
        return f"{self.kind} {self.name!r} not found"


@attrs.frozen
class AlreadyPresent(MasterError):
    kind: Kind
    name: str
    existing_id: str

    @property
    def message(self) -> str:
        return f"{self.kind} {self.name!r} already exists (id {self.existing_id})"


@attrs.frozen
class InvalidArgument(MasterError):
    detail: str

    @property
    def message(self) -> str:
        return self.detail


@attrs.frozen
class NameReserved(MasterError):
    """Another CreateTable (or a rename) of this name is being replicated. It may still
    fail, so this is not ALREADY_PRESENT: the client asks again later."""

    name: str

    @property
    def retryable(self) -> bool:
        return True

    @property
    def message(self) -> str:
        return f"table name {self.name!r} is reserved by a request in flight; retry later"


@attrs.frozen
class NotEnoughServers(MasterError):
    """Placement needs ``needed`` distinct live tablet servers and knows ``live``.

    Retryable unless ``certain``: servers that are starting, or that this master has not
    heard from yet, may join. ``certain`` is the shell's call (service.py): once a master
    has run longer than its dead-after timeout, every live tablet server has heartbeated to
    it within that window (they heartbeat every master), so its count of live servers is
    the truth and asking again only makes the operator wait for the same answer (issue 31:
    ``table create --replicas 5`` with 4 servers took 10.9 s to say so)."""

    needed: int
    live: int
    certain: bool = False

    @property
    def retryable(self) -> bool:
        return not self.certain

    @property
    def message(self) -> str:
        return (f"not enough live tablet servers: {self.needed} needed for the replicas, "
                f"{self.live} live")


@attrs.frozen
class IllegalState(MasterError):
    detail: str

    @property
    def message(self) -> str:
        return self.detail


class CatalogCorrupt(Exception):
    """A catalog row that does not decode, or decodes to something impossible."""

    def __init__(self, key: bytes, reason: str) -> None:
        super().__init__(f"catalog row {key!r}: {reason}")
        self.key = key
        self.reason = reason


class NotCommitted(Exception):
    """A plan's RPCs were asked for with a catalog that does not hold the plan's write."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


__all__ = [
    "AlreadyPresent",
    "CatalogCorrupt",
    "IllegalState",
    "InvalidArgument",
    "MasterError",
    "NameReserved",
    "NotCommitted",
    "NotEnoughServers",
    "NotFound",
]
