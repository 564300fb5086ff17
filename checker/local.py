"""The streaming driver: trace files through the core, node by node. Both engines use it.

Files are grouped by node (each file's first line names its node and incarnation) and read
in incarnation order; ``stream_node`` reads one node's files chunk by chunk and gives each
line to its key's ``KeyState``. When the node is done its keys are finished and dropped, so
memory holds the keys of one node plus the global-check tables (which grow with tablets and
terms), never the events. Files whose first line cannot be decoded are still read (their
errors are reported), each on its own, after the others.

Each file's events reach the replay in ``seq`` order, the writer's order, not the file's
(``_in_seq_order``, ``traces.FileOrder``): a line up to ``traces.REORDER_WINDOW`` lines late
is put back in its place, so two swapped lines are one ``OutOfOrder`` finding rather than a
gap, a reordering and whatever the replay makes of the misordered steps. Memory grows by
at most that many envelopes per file.

The local engine (``LocalChecker``) runs every group in one process; the Spark engine
(``checker.spark``) gives each task a set of groups and runs the same ``stream_node``.

The hot loop
------------
Per line, ``stream_node`` (its hot loop, ``_NodeReplay._events``) does only what a memo hit
needs: the per-file order check on integers (in ``_in_seq_order``, a generator:
``FileOrder`` runs only when the fast comparison fails; the generator costs about 2% of
the per-event time), the key lookup, the memo lookup on ``(state id, event, raw args, raw
state)`` (or, for a key in shape mode, the shape memo's: ``Replayer.shape_step``), the term
check, the rebuilt log (``LogTracker.append`` / ``commit_step``, whose first branch is the
fast path: an append that extends the log's last run, a commit inside it) and the context
window.
Everything else (a memo miss, a finding, an incarnation boundary, an event whose checks
read its parameters) goes through ``Replayer.feed_raw``, which consults the spec. The
shortcut does exactly what ``feed_raw`` does for such an outcome
(``tests/trace/test_driver.py`` replays the corpus and a cluster run both ways and
compares). At each file the driver tells the replayer a node's incarnation begins
(``Replayer.begin_file``) and, after a clean one, that it ended (``end_file``).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Final

import attrs
import msgspec

from revivify.checker.catalog import CatalogReplay, catalog_replica
from revivify.checker.facts import Blind, Deny, FactSink, Incarnation, KeyLast, ServerFormat
from revivify.checker.global_checks import GlobalChecks
from revivify.checker.keys import remember
from revivify.checker.replay import (
    DEFAULT_MAX_FRONTIER,
    FAST_LOG,
    FAST_PLAIN,
    RESET_EVERY,
    KeyState,
    NodeState,
    Outcome,
    Replayer,
    Violation,
)
from revivify.checker.report import Report, from_input_error
from revivify.checker.traces import (
    ENVELOPE_DECODE,
    NODE_EVENTS,
    ORDER_KINDS,
    Envelope,
    FileOrder,
    InputError,
    discover,
    first_envelope,
    name_incarnation,
    open_trace,
    refused_line,
    tablet_error,
)
from revivify.contract.events import CATALOG_TABLET, KNOWN_EVENTS
from revivify.spec.catalog import DEFAULT as CATALOG_SPEC
from revivify.spec.catalog import CatalogSpec, ReplicaView

_NO_LAMPORT = float("inf")  # no int is above it: the fast order check fails
# Each known event name as one shared string: a decoded line's name is a new string, and a
# key's window keeps the names of its last events (a follower keeps every node's keys).
_EVENT_NAMES: Final = {name: name for name in KNOWN_EVENTS}


@attrs.define
class NodeStats:
    events: int = 0
    server_events: int = 0
    keys: int = 0


def group_files(files: list[str], errors: list[InputError] | None = None,
                ) -> list[tuple[str, list[str]]]:
    """(node, its files in incarnation order), nodes sorted; then ("", [file]) for each
    file whose first line names no node. A file with no line to read (empty, or only a
    torn or malformed line) goes with the node its name gives (``name_incarnation``) if
    that node has files: it is one of the node's incarnations (``MissingIncarnation``
    must not count it lost).

    A node has one file per incarnation. A second file that opens with the same (node,
    incarnation) -- typically the same trace collected twice, say ``x.jsonl`` beside its
    archived ``x.jsonl.gz`` -- is appended to ``errors`` as ``DuplicateIncarnation`` and
    left out: replaying one incarnation twice would only produce false violations."""
    by_node: dict[str, list[tuple[int, str]]] = defaultdict(list)
    orphans: list[str] = []
    nameless: list[str] = []
    for f in files:
        head = first_envelope(f)
        if head is None:
            nameless.append(f)
        else:
            by_node[head[0]].append((head[1], f))
    for f in nameless:
        named = name_incarnation(f)
        if named is not None and named[0] in by_node:
            by_node[named[0]].append((named[1], f))
        else:
            orphans.append(f)
    groups: list[tuple[str, list[str]]] = []
    for node in sorted(by_node):
        kept: list[str] = []
        last: tuple[int, str] | None = None
        for inc, f in sorted(by_node[node]):
            if last is not None and last[0] == inc:
                if errors is not None:
                    errors.append(InputError(
                        "DuplicateIncarnation", f, 0, "inc",
                        f"node {node} incarnation {inc} is also in {last[1]}; this file "
                        "is not checked (one file per incarnation)"))
                continue
            kept.append(f)
            last = (inc, f)
        groups.append((node, kept))
    return groups + [("", [f]) for f in orphans]


def _input_error(e: InputError) -> Violation:
    return from_input_error(e, violation=e.kind in ORDER_KINDS and e.kind != "MixedFile")


# Where a driver gets a file's lines: the local engine and the Spark files plan open the
# file; the Spark dataframe plan hands over the rows Spark read (``checker.spark``).
Opener = Callable[[str], AbstractContextManager[Iterable[bytes]]]


def _in_seq_order(f: str, fh: Iterable[bytes], order: FileOrder,
                  add: Callable[[Violation], None],
                  begin: Callable[[int, Envelope], None]) -> Iterator[tuple[int, Any]]:
    """A file's events, ``(line, Envelope)``, in seq order (``traces.FileReader``, inlined):
    the order findings and the lines that give no event go to ``add``; ``begin(line, ev)``
    hears the first event released, before it is yielded. At the end, ``order`` holds the
    file's node, incarnation, first and last clocks in seq order.

    The fast path: while lines arrive in order (``FileOrder.fast_state``), the next seq
    and the last clock are locals, and a line whose seq is the next, whose clock is above
    and whose node and incarnation are the file's skips ``FileOrder``: it would only
    release it and move both on. Any other line writes them back (``resync``) and goes
    through ``FileOrder``. Out of the fast path ``lamport`` is ``_NO_LAMPORT``: no clock is
    above it, so the fast comparison fails whatever the seq (seqs are untrusted input)."""
    decode = ENVELOPE_DECODE
    decode_error = msgspec.MsgspecError
    server_events = NODE_EVENTS
    nseq = -1
    lamport: float = _NO_LAMPORT
    fnode: str | None = None
    finc: int | None = None
    begun = False
    ev: Any
    i = 0
    for raw in fh:
        i += 1
        try:
            ev = decode(raw)
        except decode_error:
            ev = refused_line(raw, f, i)
            if ev is None:
                continue
            if not isinstance(ev, Envelope):
                add(_input_error(ev))
                if lamport != _NO_LAMPORT:
                    order.resync(nseq, int(lamport))
                    lamport = _NO_LAMPORT
                order.dropped += 1
                continue
        if (ev.tablet is None) is not (ev.event in server_events):
            add(_input_error(tablet_error(ev, f, i)))
            if lamport != _NO_LAMPORT:
                order.resync(nseq, int(lamport))
                lamport = _NO_LAMPORT
            order.dropped += 1
            continue
        if ev.seq == nseq and ev.lamport > lamport and ev.node == fnode and ev.inc == finc:
            nseq += 1
            lamport = ev.lamport
            yield i, ev
            continue
        if lamport != _NO_LAMPORT:
            order.resync(nseq, int(lamport))
        released = _released(order.see(i, ev), add, None if begun else begin)
        begun = begun or bool(released)
        fnode, finc = order.node, order.inc
        fast = order.fast_state()
        nseq, lamport = (-1, _NO_LAMPORT) if fast is None else fast
        yield from released
    if lamport != _NO_LAMPORT:
        order.resync(nseq, int(lamport))
    yield from _released(order.finish(), add, None if begun else begin)


@attrs.define
class SeqFeed:
    """``_in_seq_order`` in push form, for a file read as it grows: its lines are given one
    by one (``push``), each answered with the events it releases in seq order; ``finish``
    at the file's end. The same fast path as ``_in_seq_order`` (a line in order skips
    ``FileOrder.see``, which would only release it and move ``seq`` and ``lamport`` on),
    written back at once (``resync``) since no local survives between pushes. Plain data
    (no callbacks kept): the follower's saved state holds it (checker/follow.py)."""

    file: str
    order: FileOrder = attrs.field(init=False)
    line: int = 0  # lines pushed, blank ones included (line numbers are 1-based)
    begun: bool = False  # the first event was released (``begin`` told)
    stop_line: int = 0  # the line of the file's server_stop so far (0: none)

    def __attrs_post_init__(self) -> None:
        self.order = FileOrder(self.file)

    def push(self, raw: bytes, add: Callable[[Violation], None],
             begin: Callable[[int, Envelope], None]) -> list[tuple[int, Envelope]]:
        self.line += 1
        i, f, order = self.line, self.file, self.order
        ev: Any
        try:
            ev = ENVELOPE_DECODE(raw)
        except msgspec.MsgspecError:
            ev = refused_line(raw, f, i)
            if ev is None:
                return []
            if not isinstance(ev, Envelope):
                add(_input_error(ev))
                order.dropped += 1
                return []
        if (ev.tablet is None) is not (ev.event in NODE_EVENTS):
            add(_input_error(tablet_error(ev, f, i)))
            order.dropped += 1
            return []
        fast = order.fast_state()
        if fast is not None and ev.seq == fast[0] and ev.lamport > fast[1] and \
                ev.node == order.node and ev.inc == order.inc:
            # ``_in_seq_order``'s fast path: the next seq, a higher clock, nothing held
            # (``FileOrder.see`` would release it and move both on: ``resync``).
            order.resync(ev.seq + 1, ev.lamport)
            return [(i, ev)]
        return self._release(order.see(i, ev), add, begin)

    def finish(self, add: Callable[[Violation], None],
               begin: Callable[[int, Envelope], None]) -> list[tuple[int, Envelope]]:
        return self._release(self.order.finish(), add, begin)

    def _release(self, seen: tuple[list[InputError], list[tuple[int, Envelope]]],
                 add: Callable[[Violation], None],
                 begin: Callable[[int, Envelope], None]) -> list[tuple[int, Envelope]]:
        released = _released(seen, add, None if self.begun else begin)
        self.begun = self.begun or bool(released)
        return released


def _released(seen: tuple[list[InputError], list[tuple[int, Envelope]]],
              add: Callable[[Violation], None],
              begin: Callable[[int, Envelope], None] | None) -> list[tuple[int, Envelope]]:
    """What ``FileOrder.see`` or ``finish`` answered: its order findings to ``add``, and
    the events it released, in order, the first told to ``begin`` (None: already told)."""
    problems, released = seen
    for problem in problems:
        add(_input_error(problem))
    if released and begin is not None:
        begin(*released[0])
    return released


def stream_node(r: Replayer, files: list[str], sink: FactSink,
                add: Callable[[Violation], None], opener: Opener = open_trace,
                catalog: CatalogSpec = CATALOG_SPEC) -> NodeStats:
    """Replay one node's files (in incarnation order) through ``r``; findings go to
    ``add``, global facts to ``sink``. ``opener(file)`` gives the file's lines, each
    with its newline (a line without one is the file's torn last line). Each file's
    events are replayed in seq order (``_in_seq_order``). A master's events go through
    the catalog spec ``catalog`` (checker/catalog.py)."""
    node = _NodeReplay(r, sink, add, catalog)
    before = r.events
    for f in files:
        node.replay_file(f, opener)
    for k in node.keys.values():
        r.finish_key(k)
    node.stats.events = r.events - before
    drain_facts(r, sink)
    return node.stats


@attrs.define
class _NodeReplay:
    """One node's replay in progress (``stream_node``): its live keys, its clean ends, what
    is known of its incarnations, its masters' replay, and the counts."""

    r: Replayer
    sink: FactSink
    add: Callable[[Violation], None]
    catalog: CatalogSpec
    stats: NodeStats = attrs.Factory(NodeStats)
    keys: dict[str, KeyState] = attrs.Factory(dict)
    # (node, incarnation) of every incarnation that ended with server_stop.
    clean: set[tuple[str, int]] = attrs.Factory(set)
    ns: NodeState = attrs.Factory(lambda: NodeState(""))
    masters: CatalogReplay | None = None
    # Tablet events since the memo tables' size was last checked (``RESET_EVERY``).
    since_reset: int = 0
    # A line of the current file gave no event: its incarnation's facts are partial.
    blind: bool = False
    # Every key in flight in this replayer, not only this node's (``maybe_reset`` interns
    # them afresh): None when this node is the only one in flight (the batch drivers);
    # the follower (checker/follow.py) replays several nodes at once.
    live_keys: Callable[[], Iterable[KeyState]] | None = None

    def replay_file(self, f: str, opener: Opener) -> None:
        """One file of the node: its events, in seq order, then what its end says (a clean
        end: every startup logged; the last states and the incarnation, as facts)."""
        order = FileOrder(f)
        self.blind = False
        try:
            with opener(f) as fh:
                stop_line = self._events(f, _in_seq_order(f, fh, order, self._input_problem,
                                                          functools.partial(self._begin, f)))
            if order.inc is not None and stop_line:  # a clean end: every startup logged
                for v in self.r.end_file(self.ns, self.keys, f, stop_line, order.inc,
                                         self.clean) or ():
                    self.add(v)
        except (OSError, EOFError, ValueError) as exc:  # unreadable, bad gzip
            self.add(from_input_error(InputError("UnreadableFile", f, 0, "path", str(exc))))
            return
        finally:
            drain_facts(self.r, self.sink)
        self._file_end(f, order)

    # -- The push form of ``replay_file`` (the follower, checker/follow.py): the same
    # steps, the lines given as they are written instead of pulled from the file. Both
    # forms run ``_events`` on the events ``FileOrder`` releases, so a file replayed in
    # chunks gives what it gives replayed at once (tests/trace/test_follow.py).

    def open_file(self, f: str) -> SeqFeed:
        """The node's next file begins (``replay_file``'s first step)."""
        self.blind = False
        return SeqFeed(f)

    def push_lines(self, feed: SeqFeed, raws: Iterable[bytes]) -> None:
        """Lines of ``feed``'s file, in file order, each whole (with its newline; only
        the file's last line may lack one, and only once the file is over)."""
        begin = functools.partial(self._begin, feed.file)
        released: list[tuple[int, Envelope]] = []
        for raw in raws:
            released.extend(feed.push(raw, self._input_problem, begin))
        self._replay_released(feed, released)

    def close_file(self, feed: SeqFeed) -> None:
        """The file is over (``replay_file``'s last steps): what ``FileOrder`` still
        holds, a clean end's checks, the facts, ``_file_end``."""
        self._replay_released(feed, feed.finish(self._input_problem,
                                                functools.partial(self._begin, feed.file)))
        order = feed.order
        if order.inc is not None and feed.stop_line:
            for v in self.r.end_file(self.ns, self.keys, feed.file, feed.stop_line,
                                     order.inc, self.clean) or ():
                self.add(v)
        drain_facts(self.r, self.sink)
        self._file_end(feed.file, order)

    def _replay_released(self, feed: SeqFeed, released: list[tuple[int, Envelope]]) -> None:
        if released:
            feed.stop_line = self._events(feed.file, iter(released)) or feed.stop_line
        drain_facts(self.r, self.sink)

    def _input_problem(self, v: Violation) -> None:
        """A finding about the input itself (a line that gave no event, an order finding)."""
        if v.severity != "warning":
            self.blind = True
        self.add(v)

    def _begin(self, f: str, line: int, first: Envelope) -> None:
        """The node's next incarnation begins (``Replayer.begin_file``)."""
        self.ns.node = self.ns.node or first.node
        for v in self.r.begin_file(self.ns, self.keys, f, line, first.inc) or ():
            self.add(v)

    def _events(self, f: str, lines: Iterator[tuple[int, Any]]) -> int:
        """The hot loop (the module docstring): each event of the file to its key; a step
        of a key in shape mode or a clean memo hit inline, anything else through
        ``Replayer.feed_raw``. Returns the line of the file's server_stop (0: none)."""
        r = self.r
        keys = self.keys
        add = self.add
        feed_raw = r.feed_raw
        memo_get = r.memo.get  # the memo is only replaced by maybe_reset (bound again then)
        shape_step = r.shape_step
        names = _EVENT_NAMES
        since_reset = self.since_reset
        events = stop_line = 0
        ev: Any
        try:
            for i, ev in lines:
                tablet = ev.tablet
                if tablet is None:
                    stop_line = self._server_event(f, i, ev) or stop_line
                    continue
                since_reset += 1
                if since_reset >= RESET_EVERY:
                    since_reset = 0
                    if r.maybe_reset(keys.values() if self.live_keys is None
                                     else self.live_keys()):
                        memo_get = r.memo.get
                k = keys.get(tablet)
                if k is None or k.node != ev.node:
                    k = self._new_key(k, tablet, ev.node)
                event = ev.event
                event = names.get(event, event)  # one string per name (``_EVENT_NAMES``)
                args_b = bytes(ev.args)
                st_b = bytes(ev.state)
                if ev.inc == k.inc:
                    if k.pos >= 0:  # shape mode (checker/logshape.py)
                        shaped = shape_step(k, f, i, event, args_b, st_b, ev.lamport)
                        if shaped is not False:
                            if shaped is not True:
                                for v in shaped:
                                    add(v)
                            continue
                        r.concretize(k)
                    out = memo_get((k.state, event, args_b, st_b))
                    if out is not None and out.fast and (out.obs_term >= k.max_term or
                                                         out.obs_term < 0):
                        events += 1
                        self._memo_hit(k, out, f, i, event, ev.lamport, args_b)
                        continue
                k.lam = ev.lamport
                for v in feed_raw(k, f, i, ev.inc, event, args_b, st_b, self.clean) or ():
                    add(v)
                if event == "vote_denied":  # never a memo hit (it reads its args)
                    deny_fact(self.sink, ev.node, tablet, f, i, ev.lamport, args_b)
        finally:
            r.events += events
            self.since_reset = since_reset
        return stop_line

    def _memo_hit(self, k: KeyState, out: Outcome, f: str, line: int, event: str,
                  lamport: int, args_b: bytes) -> None:
        """A clean memo hit (``out.fast``) whose term is not below the key's: exactly what
        ``feed_raw`` + ``_after`` do for it (tests/trace/test_driver.py compares), without
        the general path: the term, the post state, the rebuilt log (``FAST_LOG``) or the
        commit (``FAST_COMMIT``, ``FAST_LEADER_COMMIT``), the context window."""
        out.hits += 1
        if out.obs_term > k.max_term:
            k.max_term = out.obs_term
            k.max_term_file, k.max_term_line = f, line
        k.state = out.post
        found: list[Violation] | None = None
        if out.fast == FAST_LOG:
            assert out.log is not None
            first, prev, terms = out.log
            found = self.r.log_tracker.append(
                k, first, out.ext != 0, prev, terms, out.a, out.b, out.lead,
                self.r.states.tuples[out.post].term, f, line, lamport, args_b)
        elif out.fast != FAST_PLAIN:
            found = self.r.log_tracker.commit_step(k, out.a, out.b, out.lead, out.obs_term,
                                                   f, line, lamport, args_b)
        remember(k.window, (f, line, event, args_b))
        for v in found or ():
            self.add(v)

    def _server_event(self, f: str, line: int, ev: Envelope) -> int:
        """An event of no tablet: a clean stop (its line is returned), a format (the
        node's trace is whole when it is incarnation 1's), or a master's event (the
        catalog replay). 0 for anything but server_stop."""
        self.stats.server_events += 1
        event = ev.event
        if event == "server_stop":
            self.clean.add((ev.node, ev.inc))
            return line
        if event == "server_format":
            self.sink.fact(ServerFormat(ev.node, f, line))
            if ev.inc == 1:  # the node's trace starts at its format
                self.ns.born = True
        elif event != "server_start":
            if self.masters is None:
                self.masters = CatalogReplay(ev.node, self.sink, self.add, self.catalog)
            replica = self._catalog_replica(ev) if event == "master_ready" else None
            self.masters.feed(f, line, ev.inc, ev.lamport, event, bytes(ev.args), replica)
        return 0

    def _catalog_replica(self, ev: Envelope) -> ReplicaView | None:
        """The node's catalog replica as its replay stands at this line (events are fed
        in seq order, the replica's and the master's interleaved as written), for
        ReadyLeaderElected (spec/catalog.py). Read once per ``master_ready``: nothing on
        the hot path."""
        return catalog_replica(self.r, self.keys.get(CATALOG_TABLET), ev.node, ev.inc)

    def _new_key(self, old: KeyState | None, tablet: str, node: str) -> KeyState:
        """The key of ``tablet`` on ``node``, its first event here; ``old``: the key the
        tablet had in this group under another node, finished."""
        if old is not None:
            self.r.finish_key(old)
        k = self.keys[tablet] = self.r.new_key(node, tablet, self.ns.born)
        self.stats.keys += 1
        return k

    def _file_end(self, f: str, order: FileOrder) -> None:
        """A file read to its end: every key's state concrete again, each key's last state
        and a partial incarnation as facts, the incarnation itself (or, for a file with
        no line to read, the incarnation its name gives), and an empty file's warning."""
        r, ns, sink = self.r, self.ns, self.sink
        for k in self.keys.values():
            r.concretize(k)
        fnode, finc = order.node, order.inc
        if finc is not None:
            last_states(r, self.keys.values(), finc, sink)
            if self.blind and (fnode or ns.node):
                sink.fact(Blind(finc, fnode or ns.node, f))
        if fnode is not None and finc is not None and order.first_lamport is not None and \
                order.lamport is not None:
            sink.fact(Incarnation(fnode, finc, order.first_lamport, order.lamport,
                                  (fnode, finc) in self.clean))
        elif ns.node:  # a file with no line to read: its incarnation is not lost
            named = name_incarnation(f)
            if named is not None and named[0] == ns.node:
                # It died before its first event (server_start), so before any step.
                ns.inc = max(ns.inc, named[1])
                sink.fact(Incarnation(ns.node, named[1], 0, 0, True))
        if order.empty:
            self.add(from_input_error(InputError(
                "EmptyFile", f, 0, "path", "empty trace file (a process that wrote "
                "nothing before it died?)", warning=True)))


def last_states(r: Replayer, keys: Iterable[KeyState], inc: int, sink: FactSink) -> None:
    """The ``klast`` facts of an incarnation that ends: each key's state after its last
    event in it (cmeta term, vote, WAL end). They bound what a crash may have hidden
    (``GlobalChecks._lost_*``): the unlogged steps come after that state."""
    states = r.states.tuples
    for k in keys:
        if k.inc != inc or k.state < 0:
            continue
        s = states[k.state]
        sink.fact(KeyLast(k.tablet, inc, s.term if s.cmeta else -1, s.wal_last_index,
                          k.node, r.interner.name(s.voted_for) or ""))


def deny_fact(sink: FactSink, node: str, tablet: str, file: str, line: int, lamport: int,
              args_b: bytes) -> None:
    """A logged ``vote_denied`` (the ``deny`` fact): its voter cannot have granted that
    candidate its vote in that term unlogged (``GlobalChecks._lost_vote``)."""
    try:
        args = json.loads(args_b)
        cand, term = args["candidate"], args["t"]
    except (ValueError, TypeError, KeyError):
        return  # refused as BadArgs by the replay
    if isinstance(cand, str) and isinstance(term, int):
        sink.fact(Deny(tablet, term, node, file, line, lamport, cand))


def drain_facts(r: Replayer, sink: FactSink) -> None:
    """The replay's facts so far, to ``sink``, in the order they were made."""
    fact = sink.fact
    for f in r.facts:
        fact(f)
    r.facts.clear()


@attrs.frozen
class CheckProgress:
    """How far a long check has come: files opened and their bytes, out of the whole."""

    files_done: int
    files: int
    bytes_done: int
    bytes: int
    seconds: float

    def line(self, what: str) -> str:
        share = self.bytes_done / self.bytes if self.bytes else 1.0
        eta = (f", about {self.seconds * (1 - share) / share:.0f} s left"
               if 0 < share < 1 else "")
        return (f"{what}: {self.files_done}/{self.files} files, "
                f"{self.bytes_done / 1e6:,.0f}/{self.bytes / 1e6:,.0f} MB ({share:.0%}), "
                f"{self.seconds:.0f} s{eta}")


class _Ticker:
    """An opener that reports progress (at most every ``every`` seconds) as files open."""

    def __init__(self, files: list[str], report: Callable[[CheckProgress], None],
                 every: float) -> None:
        self.sizes = {f: _size(f) for f in files}
        self.total = sum(self.sizes.values())
        self.report = report
        self.every = every
        self.t0 = time.monotonic()
        self.next = self.t0 + every
        self.files_done = 0
        self.bytes_done = 0

    def open(self, path: str) -> AbstractContextManager[Iterable[bytes]]:
        now = time.monotonic()
        if now >= self.next:
            self.next = now + self.every
            self.report(CheckProgress(self.files_done, len(self.sizes), self.bytes_done,
                                 self.total, now - self.t0))
        self.files_done += 1
        self.bytes_done += self.sizes.get(path, 0)
        return open_trace(path)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


@attrs.define
class LocalChecker:
    """The single-process engine. ``progress`` (if given) hears how far a long run has come,
    about every ``progress_seconds``; nothing is reported for a run shorter than that."""

    max_frontier: int = DEFAULT_MAX_FRONTIER
    progress: Callable[[CheckProgress], None] | None = None
    progress_seconds: float = 5.0
    catalog: CatalogSpec = CATALOG_SPEC  # the masters' rules (another for a mutant's test)
    replayer: Replayer = attrs.field(init=False)
    globals_: GlobalChecks = attrs.field(init=False, factory=GlobalChecks)
    peak_keys: int = 0
    keys_total: int = 0

    def __attrs_post_init__(self) -> None:
        self.replayer = Replayer(max_frontier=self.max_frontier)
        self.globals_.catalog.rules = self.catalog.global_rules
        self.globals_.max_frontier = self.max_frontier  # what a crash may hide, per key

    def run(self, paths: list[str]) -> Report:
        report = Report(engine="local")
        files, errors = discover(paths)
        for e in errors:
            report.add(from_input_error(e))
        report.files = len(files)
        r = self.replayer
        dups: list[InputError] = []
        groups = group_files(files, dups)
        for e in dups:
            report.add(from_input_error(e))
        opener: Opener = open_trace
        if self.progress is not None:
            opener = _Ticker(files, self.progress, self.progress_seconds).open
        for _, group in groups:
            st = stream_node(r, group, self.globals_, report.add, opener, self.catalog)
            report.server_events += st.server_events
            self.keys_total += st.keys
            self.peak_keys = max(self.peak_keys, st.keys)
            r.maybe_reset()
        for v in self.globals_.violations():
            report.add(v)
        report.events = r.events
        report.coverage = dict(r.coverage)
        report.frontiers = dict(r.frontiers)
        report.keys = self.keys_total
        return report


def check_paths(paths: list[str], max_frontier: int = DEFAULT_MAX_FRONTIER,
                progress: Callable[[CheckProgress], None] | None = None,
                progress_seconds: float = 5.0, catalog: CatalogSpec = CATALOG_SPEC
                ) -> Report:
    return LocalChecker(max_frontier=max_frontier, progress=progress,
                        progress_seconds=progress_seconds, catalog=catalog).run(paths)


def rel(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


__all__ = ["LocalChecker", "Violation", "check_paths", "group_files", "stream_node"]
