"""The trace writer the servers use (the write side of ``traces/schema.json``).

Rules: one file per process incarnation, ``<dir>/<node-uuid>.<incarnation:04d>.jsonl``; one
event per line; each line is written with a single unbuffered ``write`` on an ``O_APPEND``
descriptor, *after* the durable step it reports has been fsync'd. A process killed at any
moment therefore loses at most the event of the step in flight (the checker's crash
frontier accounts for it) and at worst leaves a torn last line (a warning, not an error).
Trace writes are not fsync'd: a machine crash may lose a suffix, a process crash cannot.

Every line is built through the contract's typed records (``revivify.contract.events``):
the event's args Struct (``ARGS_TYPES``) and ``DurableState``, the same types the checker
decodes into. A caller's mistake (an unknown event or field, a wrong type, a state on a
server event) raises ``TraceContractError`` naming the event and the field, before anything
is written.

This module never imports ``revivify.spec`` or ``revivify.checker``: the implementation and
the spec meet only in the contract (``revivify.contract``, which imports neither).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

import msgspec

from revivify.contract.events import ARGS_TYPES, NODE_EVENTS, SCHEMA_VERSION, DurableState

# SCHEMA_VERSION (the contract's, re-exported) is what this writer writes. Version 2:
# log_append's first_index (batched appends), step_down, config_commit, DAMAGED WAL and
# blocks, a FAILED startup's reason. Version 3: log_append's prev_term and terms (the
# batch's entry terms, run-length encoded), copy_begin's source, copy_abort, the
# full-delete steps, StartTabletCopy's STALE_TERM. Version 4: the master events
# (master_ready, catalog_commit, master_call). See traces/README.md.

__all__ = ["SCHEMA_VERSION", "TraceContractError", "TraceWriter", "durable_state",
           "startup_args", "trace_path"]

_encoder = msgspec.json.Encoder()
_NO_ARGS: dict[str, Any] = {}


class TraceContractError(ValueError):
    """A line the contract does not allow (raised by ``TraceWriter.event``, nothing written):
    ``event``, ``field`` (e.g. ``args.voters[1]``, ``state.wal.location``) and the reason."""

    def __init__(self, event: str, field: str, message: str) -> None:
        super().__init__(f"trace event {event!r}: {field}: {message}")
        self.event = event
        self.field = field
        self.message = message


_AT = re.compile(r" - at `\$(?P<path>[^`]*)`")
_UNKNOWN = re.compile(r"unknown field `(?P<name>[^`]*)`")


def _contract_error(event: str, part: str, exc: msgspec.ValidationError) -> TraceContractError:
    text = str(exc)
    at = _AT.search(text)
    field = part + (at.group("path") if at else "")
    unknown = _UNKNOWN.search(text)
    if unknown:
        field += "." + unknown.group("name")
    return TraceContractError(event, field, _AT.sub("", text))


def _record(event: str, args: dict[str, Any] | msgspec.Struct | None,
            state: dict[str, Any] | DurableState | None,
            tablet: str | None) -> tuple[msgspec.Struct, DurableState | None]:
    """The line's args and state as the contract's records (validated)."""
    args_type = ARGS_TYPES.get(event)
    if args_type is None:
        raise TraceContractError(event, "event", "not an event of the contract "
                                 f"(schema version {SCHEMA_VERSION})")
    server = event in NODE_EVENTS
    if server != (tablet is None):
        raise TraceContractError(event, "tablet", "a server event has no tablet" if server
                                 else "a tablet event needs a tablet id")
    if server and state is not None:
        raise TraceContractError(event, "state", "a server event has no state")
    try:
        rec = args if type(args) is args_type else msgspec.convert(
            _NO_ARGS if args is None else args, args_type)
    except msgspec.ValidationError as exc:
        raise _contract_error(event, "args", exc) from None
    if state is None or type(state) is DurableState:
        return rec, state
    try:
        return rec, msgspec.convert(state, DurableState)
    except msgspec.ValidationError as exc:
        raise _contract_error(event, "state", exc) from None


def trace_path(directory: str, node: str, incarnation: int) -> str:
    return os.path.join(directory, f"{node}.{incarnation:04d}.jsonl")


class TraceWriter:
    """Appends events for one (node, incarnation). Not thread-safe; one per process."""

    def __init__(self, directory: str, node: str, incarnation: int,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        os.makedirs(directory, exist_ok=True)
        self.path = trace_path(directory, node, incarnation)
        self.node = node
        self.incarnation = incarnation
        self._wall_ns = wall_ns
        self._seq = 0
        self._lamport = 0
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                                       0o644)

    @property
    def lamport(self) -> int:
        return self._lamport

    def observe(self, remote_lamport: int) -> None:
        """Merge a Lamport clock received in a message (the next event is after it)."""
        if remote_lamport > self._lamport:
            self._lamport = remote_lamport

    def event(self, event: str, args: dict[str, Any] | msgspec.Struct | None = None,
              state: dict[str, Any] | DurableState | None = None,
              tablet: str | None = None) -> int:
        """Write one event; return its Lamport clock (to send with any message it causes).

        ``args``: a dict (or the record itself) of the event's args Struct (``ARGS_TYPES``),
        none for an event without args; ``state``: a dict (``durable_state``) or a
        ``DurableState``, none for a server event. ``TraceContractError`` if either does not
        fit the contract (nothing is written, the clocks do not move)."""
        if self._fd is None:
            raise ValueError(f"trace writer for {self.path} is closed")
        rec, st = _record(event, args, state, tablet)
        self._lamport += 1
        # The envelope's fields in ENVELOPE_FIELDS order (the reader's Envelope).
        line = {
            "v": SCHEMA_VERSION, "node": self.node, "inc": self.incarnation,
            "seq": self._seq, "lamport": self._lamport, "wall_ns": self._wall_ns(),
            "tablet": tablet, "event": event, "args": rec, "state": st,
        }
        data = _encoder.encode(line) + b"\n"
        written = os.write(self._fd, data)
        if written != len(data):  # a short write: finish it (still one event, in order)
            view = memoryview(data)[written:]
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        self._seq += 1
        return self._lamport

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def durable_state(*, data_state: str, tombstone_last_opid: tuple[int, int] = (0, 0),
                  superblock_qdir: bool = False, cmeta: dict[str, Any] | None = None,
                  wal: str = "ABSENT", wal_last_opid: tuple[int, int] = (0, 0),
                  blocks: str = "ABSENT",
                  quarantine: tuple[bool, bool] | None = None) -> dict[str, Any]:
    """Build the ``state`` object of the contract (see traces/README.md).

    ``data_state``: DOES_NOT_EXIST | DELETED | COPYING | READY; ``wal``: ABSENT | LIVE |
    QUARANTINED | DAMAGED (in ``wals/<id>`` but failing verification); ``blocks``: ABSENT |
    PARTIAL | PRESENT | DAMAGED (listed, but some missing or corrupt).

    ``wal_last_opid`` is the WAL's last OpId whatever its location says: for a DAMAGED WAL
    the last OpId it held (read from the records that still verify, e.g. after a corrupt
    one in the middle), and for damaged blocks the intact WAL's; ``(0, 0)`` only for an
    empty WAL. The checker compares it with the spec (damage does not change it)."""
    return {
        "superblock": {"data_state": data_state, "last_opid": list(tombstone_last_opid),
                       "qdir": superblock_qdir},
        "cmeta": cmeta,
        "wal": {"location": wal, "last_opid": list(wal_last_opid)},
        "blocks": blocks,
        "quarantine": (None if quarantine is None
                       else {"superblock": quarantine[0], "cmeta": quarantine[1]}),
    }


def startup_args(case: str, reason: str | None = None) -> dict[str, Any]:
    """The ``startup`` event's args: ``case``, and for case FAILED the ``reason`` (free text,
    required then and only then: what failed verification, e.g. "WAL segment 7: bad
    checksum at offset 4096" or "3 data blocks missing")."""
    if (case == "FAILED") != bool(reason):
        raise ValueError("a FAILED startup needs a reason; no other case takes one")
    return {"case": case, "reason": reason} if reason else {"case": case}
