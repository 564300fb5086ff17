"""The trace contract, read side: the line reader, its errors, and the durable-state codec.

The contract's definitions (versions, event names, the envelope, the state and args
Structs, ``ARGS_TYPES``, the schema generator) live in ``revivify.contract``, which the
writer in ``revivify.impl`` uses too; they are re-exported here under their old names.

Theory of operation
-------------------
A trace is JSON Lines, one file per process incarnation (``traces/README.md``). Every line is
an *envelope* (schema version, node UUID, incarnation, per-incarnation sequence number,
Lamport clock, wall time in integer ns, tablet id or null, event name) plus two objects whose
shape depends on the event: ``args`` (the spec action's parameters and a few extra facts)
and ``state`` (the abstract durable state after the step, null for server-level events).

The reader decodes only the envelope eagerly, with a typed ``msgspec`` Struct; ``args`` and
``state`` stay raw JSON bytes. The replay core memoises its work on those bytes, so a pattern
it has seen costs a dictionary lookup, and it decodes (and validates) them with their own
typed Structs only on a miss. A line is therefore validated completely the first time its
``(args, state)`` bytes are seen and is byte-identical to a validated line afterwards.

Errors are data (``InputError``): file, line, field, message. The reader never raises on
bad content: a JSON syntax error on a file's last line is a torn write (the process was
killed mid-``write``) and is a *warning*; anywhere else it is an error; a line of another
schema version is an error that names the version. The same reader runs inside Spark
(``checker.spark``) so both engines classify every line identically.
"""

from __future__ import annotations

import gzip
import heapq
import io
import os
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any, Final, Literal, cast, get_args, get_type_hints

import attrs
import msgspec

from revivify.contract.events import (
    ARGS_TYPES,
    ENVELOPE_FIELDS,
    KNOWN_EVENTS,
    MASTER_EVENTS,
    NODE_EVENTS,
    SCHEMA_HISTORY,
    SCHEMA_VERSION,
    SERVER_EVENTS,
    SUPPORTED_VERSIONS,
    TABLET_EVENTS,
    UNLOGGED_ACTIONS,
    AppendArgs,
    BlocksName,
    CaseName,
    CmetaState,
    CommitArgs,
    ConfigCommitArgs,
    CopyAbortArgs,
    CopyBeginArgs,
    CreateArgs,
    DownloadWalArgs,
    DurableState,
    ElectionArgs,
    Envelope,
    EventName,
    FormatArgs,
    LeaderArgs,
    LearnTermArgs,
    MergeArgs,
    NoArgs,
    QuarantineState,
    SbName,
    StartArgs,
    StartupArgs,
    StcArgs,
    StcName,
    StcRejectArgs,
    StepDownArgs,
    StopArgs,
    SuperblockState,
    VoteArgs,
    WalName,
    WalState,
    _Args,
)
from revivify.contract.schema import contract_schema, write_contract_schema
from revivify.spec.model import (
    BLOCKS_NAMES,
    NO_VOTE,
    SB_NAMES,
    STARTUP_NAMES,
    STC_NAMES,
    WAL_NAMES,
    ServerState,
)

# The contract's names, re-exported for the modules that import them from here (mypy's
# strict mode exports an imported name only through __all__; the names this module
# defines are exported as ever).
__all__ = [
    "ARGS_TYPES",
    "ENVELOPE_FIELDS",
    "KNOWN_EVENTS",
    "MASTER_EVENTS",
    "NODE_EVENTS",
    "SCHEMA_HISTORY",
    "SCHEMA_VERSION",
    "SERVER_EVENTS",
    "SUPPORTED_VERSIONS",
    "TABLET_EVENTS",
    "UNLOGGED_ACTIONS",
    "AppendArgs",
    "BlocksName",
    "CaseName",
    "CmetaState",
    "CommitArgs",
    "ConfigCommitArgs",
    "CopyAbortArgs",
    "CopyBeginArgs",
    "CreateArgs",
    "DownloadWalArgs",
    "DurableState",
    "ElectionArgs",
    "Envelope",
    "EventName",
    "FormatArgs",
    "LeaderArgs",
    "LearnTermArgs",
    "MergeArgs",
    "NoArgs",
    "QuarantineState",
    "SbName",
    "StartArgs",
    "StartupArgs",
    "StcArgs",
    "StcName",
    "StcRejectArgs",
    "StepDownArgs",
    "StopArgs",
    "SuperblockState",
    "VoteArgs",
    "WalName",
    "WalState",
    "contract_schema",
    "write_contract_schema",
]

TRACE_SUFFIXES: Final = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz")


class CheckedEnvelope(Envelope):
    """The envelope as the bulk reader decodes it: msgspec itself checks the schema version
    and the event name (``Literal`` fields), so a chunk of good lines needs no per-line
    Python check. A line it refuses is re-read on its own and classified by
    ``parse_line`` (same errors as ever)."""

    v: Literal[2, 3, 4]
    event: EventName


if get_args(get_type_hints(CheckedEnvelope)["v"]) != SUPPORTED_VERSIONS:
    raise AssertionError("CheckedEnvelope is out of step with SUPPORTED_VERSIONS")


class _VersionOnly(msgspec.Struct):
    v: Any = None


_ARGS_DECODERS = {name: msgspec.json.Decoder(t) for name, t in ARGS_TYPES.items()}
_STATE_DECODER: msgspec.json.Decoder[DurableState | None] = msgspec.json.Decoder(
    DurableState | None)
_ENVELOPE_DECODER = msgspec.json.Decoder(Envelope)
_CHECKED_DECODER = msgspec.json.Decoder(CheckedEnvelope)
_GENERIC_DECODER = msgspec.json.Decoder()
_VERSION_DECODER = msgspec.json.Decoder(_VersionOnly)

SB_CODES: Final = {v: k for k, v in SB_NAMES.items()}
WAL_CODES: Final = {v: k for k, v in WAL_NAMES.items()}
BLOCKS_CODES: Final = {v: k for k, v in BLOCKS_NAMES.items()}
STARTUP_CODES: Final = {v: k for k, v in STARTUP_NAMES.items()}
STC_CODES: Final = {v: k for k, v in STC_NAMES.items()}


# ---------------------------------------------------------------------------------------
# Errors as data.

InputKind = Literal["TornLine", "MalformedLine", "UnknownEvent", "UnsupportedSchemaVersion",
                    "BadArgs", "BadState", "MixedFile", "EmptyFile", "MissingPath",
                    "NoTraceFiles", "UnreadableFile", "FileShrank"]


@attrs.frozen
class InputError:
    """A line (or path) the checker cannot use. ``warning`` ones do not change the exit
    code (a torn last line, an empty file)."""

    kind: str
    file: str
    line: int  # 1-based; 0 for a whole file or path
    field: str
    message: str
    warning: bool = False

    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


class ArgsError(Exception):
    """Raised by ``decode_args`` / ``decode_state``; carries the field path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


_AT = re.compile(r" - at `\$(?P<path>[^`]*)`")


def _field_of(exc: msgspec.MsgspecError, prefix: str) -> tuple[str, str]:
    text = str(exc)
    m = _AT.search(text)
    path = prefix + (m.group("path") if m else "")
    return path or "$", _AT.sub("", text)


def decode_args(event: str, raw: bytes) -> _Args:
    try:
        args = _ARGS_DECODERS[event].decode(raw)
    except msgspec.MsgspecError as exc:
        field, msg = _field_of(exc, "args")
        raise ArgsError(field, msg) from None
    if isinstance(args, StartupArgs) and (args.case == "FAILED") != bool(args.reason):
        raise ArgsError("args.reason", "a FAILED startup states its reason (a non-empty "
                                       "string); no other case has one")
    if isinstance(args, AppendArgs) and (args.terms is not None
                                         or args.prev_term is not None):
        _check_terms(args)
    return args


def _check_terms(a: AppendArgs) -> None:
    """The shape of a version-3 batch: prev_term and terms together; runs of at least one
    entry covering first_index..op_index, the last of term op_term; terms never decrease
    along a log (from prev_term on) and every entry's term is at least 1."""
    if a.terms is None or a.prev_term is None:
        raise ArgsError("args.terms" if a.terms is None else "args.prev_term",
                        "prev_term and terms come together (or neither, as in version 2)")
    if a.prev_term < 0 or (a.first_index == 1 and a.prev_term != 0):
        raise ArgsError("args.prev_term", "the term before index 1 is 0; a term is never "
                                          "negative")
    if not a.terms:
        raise ArgsError("args.terms", "a batch has at least one run")
    last = a.prev_term
    total = 0
    for n, (term, count) in enumerate(a.terms):
        if count < 1:
            raise ArgsError(f"args.terms[{n}]", "a run holds at least one entry")
        if term < 1 or term < last:
            raise ArgsError(f"args.terms[{n}]",
                            f"term {term} after term {last}: entry terms are >= 1 and never "
                            "decrease along a log (from prev_term on)")
        last = term
        total += count
    if total != a.op_index - a.first_index + 1:
        raise ArgsError("args.terms", f"the runs hold {total} entries, the batch "
                                      f"{a.first_index}..{a.op_index} "
                                      f"{a.op_index - a.first_index + 1}")
    if last != a.op_term:
        raise ArgsError("args.terms", f"the last run's term is {last}, op_term {a.op_term}")


def decode_state(raw: bytes) -> DurableState | None:
    try:
        return _STATE_DECODER.decode(raw)
    except msgspec.MsgspecError as exc:
        field, msg = _field_of(exc, "state")
        raise ArgsError(field, msg) from None


# ---------------------------------------------------------------------------------------
# The durable-state codec: trace object <-> the spec's durable fields.


class Interner:
    """UUID strings <-> small ints, consistent within one run (spec identities are ints)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str] = []

    def id(self, name: str) -> int:
        got = self.ids.get(name)
        if got is None:
            got = self.ids[name] = len(self.names)
            self.names.append(name)
        return got

    def name(self, ident: int) -> str | None:
        if ident == NO_VOTE or not 0 <= ident < len(self.names):
            return None
        return self.names[ident]


# Durable fields the trace carries (spec DURABLE_FIELDS minus the implicit uuid_gen).
TRACED_FIELDS: Final = (
    "sb", "sb_last_term", "sb_last_index", "sb_qdir",
    "cmeta", "term", "voted_for", "config_index",
    "wal", "wal_last_term", "wal_last_index", "blocks",
    "qdir", "q_sb", "q_cmeta",
)


def cmeta_tuple(c: CmetaState | None, interner: Interner) -> tuple[bool, int, int, int]:
    if c is None:
        return (False, 0, NO_VOTE, 0)
    vote = NO_VOTE if c.voted_for is None else interner.id(c.voted_for)
    return (True, c.term, vote, c.config_index)


def durable_tuple(st: DurableState, interner: Interner) -> tuple[Any, ...]:
    """The observed state as a tuple in ``TRACED_FIELDS`` order."""
    sb = st.superblock
    q = st.quarantine
    return (
        SB_CODES[sb.data_state], sb.last_opid[0], sb.last_opid[1], sb.qdir,
        *cmeta_tuple(st.cmeta, interner),
        WAL_CODES[st.wal.location], st.wal.last_opid[0], st.wal.last_opid[1],
        BLOCKS_CODES[st.blocks],
        q is not None, bool(q and q.superblock), bool(q and q.cmeta),
    )


def spec_tuple(s: ServerState) -> tuple[Any, ...]:
    """The spec state's durable projection in ``TRACED_FIELDS`` order (bools normalised)."""
    return (
        s.sb, s.sb_last_term, s.sb_last_index, bool(s.sb_qdir),
        bool(s.cmeta), s.term if s.cmeta else 0, s.voted_for if s.cmeta else NO_VOTE,
        s.config_index if s.cmeta else 0,
        s.wal, s.wal_last_term, s.wal_last_index, s.blocks,
        bool(s.qdir), bool(s.qdir and s.q_sb), bool(s.qdir and s.q_cmeta),
    )


def state_from_tuple(t: tuple[Any, ...], base: ServerState) -> ServerState:
    """``base`` with its durable fields replaced by an observed tuple."""
    return attrs.evolve(base, **dict(zip(TRACED_FIELDS, t, strict=True)))


def encode_state(s: ServerState, uuid_of: dict[int, str]) -> dict[str, Any]:
    """The trace object for a spec state (used by the spec-walk generator)."""
    return {
        "superblock": {"data_state": SB_NAMES[s.sb], "last_opid": [s.sb_last_term,
                                                                    s.sb_last_index],
                       "qdir": bool(s.sb_qdir)},
        "cmeta": encode_cmeta(s, uuid_of) if s.cmeta else None,
        "wal": {"location": WAL_NAMES[s.wal], "last_opid": [s.wal_last_term,
                                                             s.wal_last_index]},
        "blocks": BLOCKS_NAMES[s.blocks],
        "quarantine": ({"superblock": bool(s.q_sb), "cmeta": bool(s.q_cmeta)}
                       if s.qdir else None),
    }


def encode_cmeta(s: ServerState, uuid_of: dict[int, str]) -> dict[str, Any] | None:
    if not s.cmeta:
        return None
    return {"term": s.term, "voted_for": uuid_of.get(s.voted_for),
            "config_index": s.config_index}


def describe_tuple(t: tuple[Any, ...], interner: Interner) -> str:
    d = dict(zip(TRACED_FIELDS, t, strict=True))
    parts = [f"sb={SB_NAMES.get(d['sb'], d['sb'])}"]
    if d["sb_last_term"] or d["sb_last_index"]:
        parts.append(f"tombstone_last=({d['sb_last_term']},{d['sb_last_index']})")
    if d["sb_qdir"]:
        parts.append("sb_qdir")
    if d["cmeta"]:
        vote = interner.name(d["voted_for"]) or "-"
        parts.append(f"cmeta(term={d['term']},vote={vote},cfg={d['config_index']})")
    parts.append(f"wal={WAL_NAMES.get(d['wal'], d['wal'])}"
                 f"({d['wal_last_term']},{d['wal_last_index']})")
    parts.append(f"blocks={BLOCKS_NAMES.get(d['blocks'], d['blocks'])}")
    if d["qdir"]:
        parts.append(f"qdir(sb={int(d['q_sb'])},cmeta={int(d['q_cmeta'])})")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------
# Reading lines.


@attrs.frozen
class Line:
    """A decoded envelope with where it came from."""

    file: str
    line: int
    ev: Envelope


def parse_line(data: bytes, file: str, lineno: int, is_last: bool) -> Envelope | InputError:
    """Decode one line; never raises."""
    try:
        ev = _ENVELOPE_DECODER.decode(data)
    except msgspec.MsgspecError as exc:
        return _classify(data, exc, file, lineno, is_last)
    if ev.v not in SUPPORTED_VERSIONS:
        return version_error(ev.v, file, lineno)
    if ev.event not in KNOWN_EVENTS:
        return InputError("UnknownEvent", file, lineno, "event",
                          f"unknown event {ev.event!r}")
    if (ev.event in NODE_EVENTS) != (ev.tablet is None):
        return tablet_error(ev, file, lineno)
    return ev


def version_error(v: object, file: str, lineno: int) -> InputError:
    """A line of another schema version: named, with the version this checker reads."""
    known = SCHEMA_HISTORY.get(v) if isinstance(v, int) else None
    hint = (f"; {known}: regenerate the trace with a version-{SCHEMA_VERSION} writer"
            if known else "")
    return InputError("UnsupportedSchemaVersion", file, lineno, "v",
                      f"schema version {v!r} is not supported (this checker reads version "
                      f"{SCHEMA_VERSION}, and versions 2 and 3){hint}")


def tablet_error(ev: Envelope, file: str, lineno: int) -> InputError:
    """A server event with a tablet, or a tablet event without one."""
    server = ev.event in NODE_EVENTS
    return InputError("MalformedLine", file, lineno, "tablet",
                      f"event {ev.event!r} " + ("must have tablet null" if server
                                                else "needs a tablet id"))


def _classify(data: bytes, exc: msgspec.MsgspecError, file: str, lineno: int,
              is_last: bool) -> InputError:
    try:
        generic = _GENERIC_DECODER.decode(data)
    except msgspec.MsgspecError:
        if is_last:
            return InputError("TornLine", file, lineno, "$",
                              "the last line is incomplete (process killed mid-write?)",
                              warning=True)
        return InputError("MalformedLine", file, lineno, "$",
                          "not valid JSON" + (" (a torn write in the middle of the file)"
                                              if data.lstrip().startswith(b"{") else ""))
    if isinstance(generic, dict):
        v = generic.get("v")
        if v not in SUPPORTED_VERSIONS and "v" in generic:
            return version_error(v, file, lineno)
    field, msg = _field_of(exc, "")
    return InputError("MalformedLine", file, lineno, field.lstrip("."), msg)


def open_trace(path: str) -> IO[bytes]:
    """A binary line iterator over a trace file (gzip by suffix)."""
    if path.endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb", buffering=1 << 20)


def read_bytes(path: str) -> bytes:
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as gz:
            return gz.read()
    with open(path, "rb") as f:
        return f.read()


ENVELOPE_DECODE: Final = _CHECKED_DECODER.decode


def refused_line(raw: bytes, file: str, lineno: int) -> Envelope | InputError | None:
    """The item for a line ``ENVELOPE_DECODE`` refused: None for a blank line, else what
    ``parse_line`` makes of it (a line without its newline can only be the file's last:
    a torn write)."""
    if not raw.strip():
        return None
    return parse_line(raw, file, lineno, not raw.endswith(b"\n"))


@attrs.define
class FileReader:
    """Reads one trace file: ``(line number, Envelope | InputError)``, the events in
    ``seq`` order (``FileOrder``: a line that arrives up to ``REORDER_WINDOW`` lines late is
    put back in its place), every check applied, each order finding (``ORDER_KINDS``; all
    but ``MixedFile`` are violations: the writer promised not to lose or reorder events)
    before the events it concerns. Blank lines count but yield nothing. Streams: memory
    holds at most ``REORDER_WINDOW`` events, whatever the file's length.

    This is the reference; the drivers (``local.stream_node``) inline the loop:
    ``ENVELOPE_DECODE`` per line (msgspec checks the schema version and the event name),
    ``refused_line`` for a line it refuses, then ``tablet_error`` and ``FileOrder``, with a
    shortcut for the next line in order."""

    file: str

    def lines(self, data: bytes | Iterable[bytes]) -> Iterator[
            tuple[int, Envelope | InputError]]:
        source: Iterable[bytes] = (io.BytesIO(data) if isinstance(data, bytes) else data)
        order = FileOrder(self.file)
        for i, raw in enumerate(source, 1):
            item: Envelope | InputError | None
            try:
                item = ENVELOPE_DECODE(raw)
            except msgspec.MsgspecError:
                item = refused_line(raw, self.file, i)
            if item is None:
                continue
            if not isinstance(item, Envelope):
                order.dropped += 1
                yield i, item
                continue
            if (item.event in NODE_EVENTS) != (item.tablet is None):
                order.dropped += 1
                yield i, tablet_error(item, self.file, i)
                continue
            yield from _order_items(*order.see(i, item))
        yield from _order_items(*order.finish())


def _order_items(problems: list[InputError], released: list[tuple[int, Envelope]],
                 ) -> Iterator[tuple[int, Envelope | InputError]]:
    for p in problems:
        yield p.line, p
    yield from released


ORDER_KINDS: Final = frozenset({"SequenceGap", "OutOfOrder", "LamportNotIncreasing",
                                "MixedFile"})

# How late a line may arrive and still be put back in its place: while the file's next
# seq is missing, up to this many later events are held; one more, and the missing seqs
# are judged lost (``SequenceGap``), the held events released in seq order, and a missing
# line that turns up after that is ``OutOfOrder`` where it stands (checked in file order,
# so it may also fail the replay). The writer (one per process, ``impl/trace.py``) takes
# each seq and writes its line in one step, so any reordering is a fault of the writer or
# of what copied the file; a window of 32 puts back any swap of neighbours and any local
# shuffle (a copier's buffer of a few dozen lines) while holding at most 32 envelopes.
# A real gap costs nothing but the delay: the events after it are replayed 32 lines later.
REORDER_WINDOW: Final = 32


@attrs.define
class FileOrder:
    """Per-file order checks, shared by the local and the Spark reader (``stream_node``
    and ``FileReader``): it sees each line's event in file order and releases the events
    in seq order, the writer's order, which is what ``seq`` means.

    Theory. The writer numbers a file's events 0, 1, 2, ... and its Lamport clock
    increases with them; the replay must see them in that order. A line whose seq is not
    the next one is held (a heap on (seq, line), at most ``REORDER_WINDOW`` of them) until
    the seqs before it arrive, or the window overflows, or the file ends; then the missing
    seqs are judged: lost lines (torn, malformed, ...) read before the held event, since the
    last event released in order, may have been them (each already has its own finding),
    and explain that many; any more are a ``SequenceGap`` at the held event's line. So one
    fault is one finding: two swapped lines are one ``OutOfOrder`` (at the one that arrived
    late, naming the seq it came after), and neither a gap nor a replay cascade. A line
    whose seq is not above every seq before it is ``OutOfOrder``: put back in its place if
    its seq is still to come, else (a duplicate, or a line later than the window) replayed
    where it stands without the order and clock checks, which have nothing to compare it
    with. ``LamportNotIncreasing`` is judged in seq order.

    Invariants (between calls): ``seq`` is the last seq released in order (None: none
    yet) and ``lamport`` the highest clock released in order; every held seq is above
    ``seq + 1``, and at most ``REORDER_WINDOW`` are held; ``top`` (the highest seq of any
    line) equals ``seq`` (or -1) whenever nothing is held. ``local.stream_node`` keeps
    ``seq`` and ``lamport`` in locals while lines arrive in order (``fast_state``) and
    writes them back (``resync``) before its next call."""

    file: str
    node: str | None = None
    inc: int | None = None
    seq: int | None = None
    lamport: int | None = None
    # Lines dropped since the last event released in order (torn, malformed, unknown
    # event, other version): each already has its own finding, and may have been an event
    # a gap misses (one fault, one finding).
    dropped: int = 0
    top: int = -1
    first_lamport: int | None = None  # the clock of the first event released in order
    # (seq, line, the lines dropped before it since the last release in order, event):
    # a heap; (seq, line) is unique, so the event is never compared.
    held: list[tuple[int, int, int, Envelope]] = attrs.Factory(list)
    # Seq ranges judged lost (to name a line that turns up later than the window).
    skipped: list[tuple[int, int, int]] = attrs.Factory(list)

    def see(self, lineno: int, ev: Envelope) -> tuple[list[InputError],
                                                      list[tuple[int, Envelope]]]:
        """The findings of a line, and the events it releases in seq order (line, event):
        none while it or the seqs before it are held, several when it fills a gap."""
        out: list[InputError] = []
        released: list[tuple[int, Envelope]] = []
        if self.node is None:
            self.node, self.inc = ev.node, ev.inc
        elif ev.node != self.node or ev.inc != self.inc:
            out.append(InputError("MixedFile", self.file, lineno, "node" if ev.node !=
                                  self.node else "inc",
                                  f"file holds ({self.node}, inc {self.inc}) but this line "
                                  f"is ({ev.node}, inc {ev.inc})"))
            released.append((lineno, ev))  # another file's event: no place in this order
            return out, released
        s = ev.seq
        nxt = 0 if self.seq is None else self.seq + 1
        late = s <= self.top
        if late:
            out.append(self._out_of_order(lineno, s, nxt))
            if s < nxt:  # its place is behind us: checked where it stands
                released.append((lineno, ev))
                return out, released
        else:
            self.top = s
        heapq.heappush(self.held, (s, lineno, self.dropped, ev))
        self._drain(REORDER_WINDOW, out, released)
        return out, released

    def finish(self) -> tuple[list[InputError], list[tuple[int, Envelope]]]:
        """At the end of the file: whatever is held is released, its gaps judged."""
        out: list[InputError] = []
        released: list[tuple[int, Envelope]] = []
        self._drain(0, out, released)
        return out, released

    def _drain(self, window: int, out: list[InputError],
               released: list[tuple[int, Envelope]]) -> None:
        """Release the held events that are next in seq order; while more than ``window``
        wait, judge the seqs before the first of them lost."""
        held = self.held
        while held:
            s, line, dropped, ev = held[0]
            nxt = 0 if self.seq is None else self.seq + 1
            if s > nxt:
                if len(held) <= window:
                    return
                if s - nxt > dropped:
                    out.append(InputError(
                        "SequenceGap", self.file, line, "seq",
                        f"first seq is {s}, not 0" if self.seq is None else
                        f"seq {s} after seq {self.seq}: {s - nxt} event(s) missing"))
                self.skipped.append((nxt, s - 1, line))
            heapq.heappop(held)
            if s >= nxt:  # in order (else a duplicate of one released just before)
                if self.lamport is not None and ev.lamport <= self.lamport:
                    out.append(InputError("LamportNotIncreasing", self.file, line,
                                          "lamport",
                                          f"lamport {ev.lamport} after {self.lamport}"))
                    ev_lamport = self.lamport
                else:
                    ev_lamport = ev.lamport
                if self.first_lamport is None:
                    self.first_lamport = ev.lamport
                self.seq = s
                self.lamport = ev_lamport
                self.dropped = 0
            released.append((line, ev))

    def _out_of_order(self, lineno: int, s: int, nxt: int) -> InputError:
        top = self.top
        if s >= nxt:
            twin = next((h[1] for h in self.held if h[0] == s), None)
            if twin is not None:
                why = f"seq {s} again (line {twin} has it): a duplicate; checked after it"
            else:
                at = min(h[1] for h in self.held if h[0] == top)  # its first line
                why = (f"seq {s} after seq {top} (line {at}): the lines are out of seq "
                       "order; checked in seq order")
        else:
            lost = next((h[2] for h in reversed(self.skipped) if h[0] <= s <= h[1]), None)
            if lost is not None:
                why = (f"seq {s} after seq {top}: more than {REORDER_WINDOW} lines late "
                       f"(judged missing at line {lost}); checked where it stands")
            elif s >= 0:
                why = (f"seq {s} again (the file is at seq {top}): a duplicate; checked "
                       "where it stands")
            else:
                why = f"seq {s} is below 0 (seqs run 0, 1, 2, ...); checked where it stands"
        return InputError("OutOfOrder", self.file, lineno, "seq", why)

    def fast_state(self) -> tuple[int, int] | None:
        """(next seq, last clock) while the next line in order may skip this object (it
        would only be released and move both on): nothing held, no dropped line to
        account for. None otherwise."""
        if self.held or self.dropped or self.seq is None or self.lamport is None:
            return None
        return self.seq + 1, self.lamport

    def resync(self, next_seq: int, lamport: int) -> None:
        """The lines a driver let skip ``see`` (``fast_state``) moved the order on to
        ``next_seq`` and ``lamport``."""
        self.seq = self.top = next_seq - 1
        self.lamport = lamport

    @property
    def empty(self) -> bool:
        """Whether no line but blank ones was read: every other line is seen (which names
        the file's node) or counts as dropped (a count only a release in order resets)."""
        return self.node is None and self.dropped == 0


def discover(paths: Iterable[str]) -> tuple[list[str], list[InputError]]:
    """Trace files under the given paths (files as given; directories recursively)."""
    files: list[str] = []
    errors: list[InputError] = []
    for p in paths:
        if not os.path.exists(p):
            errors.append(InputError("MissingPath", p, 0, "path", "no such file or directory"))
            continue
        if os.path.isdir(p):
            found = sorted(
                os.path.join(root, f)
                for root, _, names in os.walk(p)
                for f in names
                if f.endswith(TRACE_SUFFIXES)
            )
            if not found:
                errors.append(InputError("NoTraceFiles", p, 0, "path",
                                         "directory holds no trace files "
                                         f"({', '.join(TRACE_SUFFIXES)})"))
            files.extend(os.path.abspath(f) for f in found)
        else:
            files.append(os.path.abspath(p))
    return files, errors


_TRACE_NAME = re.compile(r"^(?P<node>.+)\.(?P<inc>\d+)\.(?:jsonl|ndjson)(?:\.gz)?$")


def name_incarnation(path: str) -> tuple[str, int] | None:
    """(node, incarnation) from a trace file's name (``<node-uuid>.<inc:04d>.jsonl``), for
    a file without a line to read them from (a process killed before its first event was
    whole leaves an empty file, or a torn first line)."""
    m = _TRACE_NAME.match(os.path.basename(path))
    return (m.group("node"), int(m.group("inc"))) if m else None


def first_envelope(path: str) -> tuple[str, int] | None:
    """(node, incarnation) from the first decodable line of a file, cheaply."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            for raw in f:
                try:
                    ev = _ENVELOPE_DECODER.decode(raw)
                except msgspec.MsgspecError:
                    continue
                return ev.node, ev.inc
    except OSError:
        return None
    return None
