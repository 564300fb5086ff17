"""Checking traces while they are written (``trace follow``) and resuming a check
(``trace check --state``): the batch replay, fed as the files grow.

The model of the input. A server incarnation appends whole lines to its own file; a
killed one may leave a torn last line, and the next incarnation of that node opens a new
file only after the previous process is gone. So at any moment each node has at most one
file that may still grow: its highest incarnation's. The files of different nodes grow
independently.

How the batch check is followed. ``LocalChecker`` replays node by node, each node's files in
incarnation order (``local.group_files``), each file's events in seq order
(``FileOrder``), with one ``Replayer`` and one ``GlobalChecks``. The follower does exactly
that, for every node at once: each node is a ``_Group`` whose ``_NodeReplay`` is fed the
whole lines of its *current* file as they appear (``_NodeReplay.push_lines``, the push form
of ``replay_file``: the same ``_events`` over the same ``FileOrder``). A line without its
newline is held until it is completed. The current file is over, and is closed
(``close_file``: its torn tail, the end of a clean incarnation, its facts) when a later
incarnation of the node appears, or at the end (``finish``). A node's replay state does not
depend on other nodes, and every merge of ``GlobalChecks`` is a min, a max or a union
(global_checks.GlobalChecks.fact), so interleaving nodes changes neither the findings nor
the global tables: ``finish`` ends every node as ``stream_node`` does and asks the global
checks, and the verdict is the batch check's on the finished files
(tests/trace/test_follow.py checks it on the corpus, line by line, in random interleavings,
with torn tails and random pauses).

When a finding is printed (``Follower.poll``):

* a per-key finding (a step the spec refuses, an order or input finding, a term regression,
  a double vote...) as soon as the line that proves it is whole: the replay of a key
  depends only on its own lines. ``FileOrder`` holds a line whose seq is not the next one
  until the missing seqs arrive (at most ``REORDER_WINDOW`` lines) or the file is over.
* a finding at a crash boundary (the crash frontier: unlogged steps, ``MissingStartup``,
  ``MissingIncarnation``) when the node's next incarnation writes its first line: only
  then is the crash, and the state after it, known.
* a global finding (across keys or nodes) when it holds on the facts so far, with every
  key's pending facts flushed as if it ended and every incarnation still running taken as
  crashed right after its last line (the widest excuse its crash could still give:
  ``provisional``), *and* no unread line can bear on it any more: every node holding its
  tablet or named by the tablet's events has written a line with a clock above the
  highest clock read when the finding first appeared (``_judge``). The lines that prove it
  were read by then, so their clocks are at or below that one; each node's clocks increase
  along its file, so such a node has no unread line at or below it; and a line that
  happened before the finding's lines has a lower clock (Lamport). A node that logged
  ``server_stop`` counts at once; a node that is down without it (crashed, or idle) holds
  the finding until its next incarnation writes past that clock, or the end: that is when
  its crash frontier is known. What can still withdraw a finding told: a later line of a
  running incarnation that gives no event makes the whole incarnation *blind* (the batch
  rules then excuse every step after its start), and traces whose clocks break causality
  (themselves a finding). The final verdict then leaves it out and the follower tells it
  again as ``withdrawn``. Global findings are judged at most every ``GLOBAL_EVERY``
  seconds, only when lines came in, and at most a fifth of the time (``judge_factor``).

Memory is the live state, not the history: per node its keys (``KeyState``, bounded by
the spec's small state plus the context window), its ``FileOrder`` (at most
``REORDER_WINDOW`` held lines), the global tables (which grow with tablets and terms, as
in the batch check), and per file a ``_Tail`` (offsets). No event is kept once replayed.
The batch check holds one node's keys at a time and drops them when the node is done;
the follower holds every node's for as long as it runs, so it keeps them small:

* a key that took no event in its node's last ``PACK_LINES`` lines (or whose node wrote
  nothing for two polls) is packed (``_FollowedNode``: a compressed pickle, about 170
  bytes against 4 KB as objects) and unpacked at its next event;
* a file is read ``CHUNK`` bytes of whole lines at a time, and a new file only up to its
  first decodable line to learn its node (``_Tail.read_head``);
* a provisional judgement merges pending facts into the follower's own tables and takes
  them back after (``global_checks.Journal``), rather than judging a copy of the tables,
  and keeps none of those facts between judgements; and it merges one shard of tablets
  at a time (at most ``JUDGE_KEYS`` keys: ``Follower._judge_shards``, which says why a
  shard judged alone gives its tablets' findings exactly), so a judgement holds the
  tables plus one shard's pending facts, not every key's;
* ``finish`` reads every line first, then drops the replayer's memo tables (a cache: the
  few lines ``FileOrder`` still holds are replayed without it), then ends the nodes one
  by one and drops each node's keys once ended, as the batch check does: the final
  tables grow into the memory the memo tables held.

So the follower's peak is below the batch check's: the batch check ends holding its
memo tables, its final tables and the checks' temporaries at once; the follower never
holds the three together (``bench/checker.py --follow`` measures both peaks side by
side). What it holds beyond the batch check is the packed keys and, during a
judgement, one shard's pending facts.

Resuming (``resume.dumps`` / ``resume.loads``; the file format is checker/resume.py). The
follower's state between two polls is plain data once the replayer's caches are left out:
the saved state is exactly that, and ``trace check --state FILE`` is one poll of a
restored (or new) follower, a snapshot, then ``finish`` on the live objects. A later run
restores the snapshot taken *before* ``finish`` and goes on from each file's offset, so
a run over the new lines gives the verdict of one run over everything.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import operator
import os
import pickle
import time
import zlib
from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any, Final

import attrs
import msgspec

from revivify.checker.facts import GlobalFact
from revivify.checker.global_checks import GlobalChecks, Journal
from revivify.checker.keys import KeyState, Violation
from revivify.checker.local import SeqFeed, _NodeReplay, drain_facts
from revivify.checker.replay import DEFAULT_MAX_FRONTIER, Replayer
from revivify.checker.report import Report, from_input_error
from revivify.checker.traces import Envelope, InputError, discover, name_incarnation
from revivify.contract.events import CATALOG_TABLET, KNOWN_EVENTS
from revivify.spec.catalog import DEFAULT as CATALOG_SPEC
from revivify.spec.catalog import CatalogSpec, ReplicaView

# Bytes read from a file at a time: memory per poll is bounded by this, not by the file
# (the chunk's lines and the events they release are held at once).
CHUNK: Final = 1 << 18
# A key that took no event in its node's last this many lines is packed (``_Group._pack``).
PACK_LINES: Final = 1024
# The global checks are judged at most this often while following (seconds).
GLOBAL_EVERY: Final = 0.5
# A provisional judgement merges the pending facts of at most this many keys at a time
# (``Follower._judge_shards``; more only for one tablet of more keys).
JUDGE_KEYS: Final = 4096
_HEAD = msgspec.json.Decoder(Envelope)  # what ``traces.first_envelope`` decodes with


class _Wall(msgspec.Struct):
    """A line's wall clock alone (the follower's lag: ``Follower.newest_wall_ns``)."""

    wall_ns: int = 0


_WALL = msgspec.json.Decoder(_Wall)


def _wall_ns(line: bytes) -> int:
    """The wall clock of a whole line, 0 when it does not decode (a torn tail)."""
    try:
        return _WALL.decode(line).wall_ns
    except msgspec.MsgspecError:
        return 0


@attrs.define
class _Tail:
    """One trace file as far as it has been read. ``offset``: the bytes of its whole
    lines read (a torn last line is left for later); ``held``: whole lines read before
    the file's node is known (its first decodable line names it; ``first_envelope``).
    ``group``: the group it belongs to once known (a node, or ``"?" + path`` for a file
    no node can be found for, as ``group_files``' orphans); ``done``: replayed to its end."""

    path: str
    inc: int = 0
    offset: int = 0
    size: int = -1
    group: str | None = None
    head: bool = False  # its node and incarnation come from a line, not from its name
    done: bool = False
    held: list[bytes] = attrs.Factory(list)
    # Why the file could not be read on (kind, message), and whether that was reported.
    trouble: tuple[str, str] | None = None
    told: bool = False

    @property
    def gz(self) -> bool:
        return self.path.endswith(".gz")

    def grew(self) -> bool:
        """Whether the file's size changed since last asked (activity, ``--until-idle``)."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            size = -1
        changed = size != self.size
        self.size = size
        return changed

    def _shrank(self, size: int) -> bool:
        """Whether the file is shorter than what was read of it (``FileShrank``)."""
        if size >= self.offset:
            return False
        # Rewritten: what was checked is no longer there.
        self.trouble = self.trouble or ("FileShrank", (
            f"the file holds {size} bytes, fewer than the {self.offset} already "
            "checked: it was truncated or rewritten (trace files only grow); "
            "the rest of it is not read"))
        return True

    def read_head(self, final: bool) -> tuple[str, int] | None:
        """The file's node and incarnation (``traces.first_envelope``): its lines up to
        its first decodable one, read one by one into ``held`` and no further (the rest is
        read chunk by chunk when its node replays it, so a file found already long, say a
        follower started on a day of traces, is never held whole: memory follows the live
        state). A gzip file, only when final, is looked into without holding a line (it
        is read again from its start when replayed)."""
        if self.gz:
            if not final:
                return None
            try:
                with gzip.open(self.path, "rb") as gz:
                    return _head(gz)
            except (OSError, EOFError):  # unreadable: ``read`` meets it when replayed
                return None
        got = _head(self.held)
        if got is not None:
            return got
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 (closed below)
        except OSError as exc:
            self.trouble = self.trouble or ("UnreadableFile", str(exc))
            return None
        with fh:
            if self._shrank(os.fstat(fh.fileno()).st_size):
                return None
            fh.seek(self.offset)
            while raw := fh.readline():
                if not raw.endswith(b"\n") and not final:
                    break  # a torn last line: read again once whole (or final)
                self.offset += len(raw)
                self.held.append(raw)
                got = _head((raw,))
                if got is not None:
                    return got
        return None

    def read(self, final: bool) -> Iterator[list[bytes]]:
        """The file's new whole lines, chunk by chunk, each with its newline; with
        ``final`` also its torn last line (the file is over: the batch reader yields it
        without its newline). A gzip file cannot be read while it is written: it is read
        whole once, when it is final."""
        if self.gz:
            if final and self.offset == 0:
                self.offset = 1  # read: a gzip file is read once, chunk by chunk too
                with gzip.open(self.path, "rb") as gz:
                    while chunk := gz.readlines(CHUNK):
                        yield chunk
            return
        try:
            fh = open(self.path, "rb", buffering=1 << 16)  # noqa: SIM115 (a generator)
        except OSError as exc:
            self.trouble = self.trouble or ("UnreadableFile", str(exc))
            return
        with fh:
            if self._shrank(os.fstat(fh.fileno()).st_size):
                return
            fh.seek(self.offset)
            # Whole lines, about CHUNK bytes at a time, each its own bytes object (no
            # chunk-sized buffer copied around). Only the file's last line can lack its
            # newline: a torn write, read again next time unless the file is over.
            while lines := fh.readlines(CHUNK):
                torn = not lines[-1].endswith(b"\n")
                if torn and not final:
                    lines.pop()
                if lines:
                    self.offset += sum(map(len, lines))
                    yield lines
                if torn:
                    break


# A key packed is the tuple of its fields' values, in ``attrs.fields`` order (what its
# ``__init__`` takes back), not attrs' ``__getstate__`` dict of them by name.
_KEY_VALUES: Final = operator.attrgetter(*(f.name for f in attrs.fields(KeyState)))


@attrs.define
class _FollowedNode(_NodeReplay):
    """A node's replay as the follower keeps it: ``_NodeReplay`` with its idle keys packed.

    The batch check holds one node's keys at a time; the follower holds every node's, for
    as long as it runs (a node may write again). So a key that took no event for a while
    is kept as bytes (``packed``: a pickle of the key, its state as the state's tuple, not
    an id into the replayer's tables, compressed): about 170 bytes against 4 KB as
    objects. It is
    unpacked when its next event comes (``_new_key``: a key not in ``keys`` is looked up
    here first) or when something reads every key of the node (a file begins or ends,
    the masters' catalog replica); ``pack_idle`` packs. Packing leaves shape mode (the
    key's concrete state is packed: ``Replayer.concretize``, as a saved state does), which
    changes no verdict (tests/trace/test_follow.py, packing at random points)."""

    packed: dict[str, bytes] = attrs.Factory(dict)
    # The strings packed by reference (``_Packer``): the node's files, its UUID, the
    # event names; each keeps its index.
    shared: list[str] = attrs.Factory(lambda: sorted(KNOWN_EVENTS))
    shared_ids: dict[str, int] = attrs.Factory(dict)
    # The compression's preset dictionary: the node's first packed key's pickle. Keys of
    # one node are alike (their fields, their events' arguments), so each is compressed
    # against it: about 170 bytes a key, against 400 without.
    zdict: bytes = b""

    def open_file(self, f: str) -> SeqFeed:
        self._share(f)
        return super().open_file(f)

    def _share(self, s: str) -> None:
        if not self.shared_ids:
            self.shared_ids.update((x, i) for i, x in enumerate(self.shared))
        if s not in self.shared_ids:
            self.shared_ids[s] = len(self.shared)
            self.shared.append(s)

    def pack_idle(self, active: Callable[[KeyState], bool]) -> None:
        """Pack every key not ``active``."""
        r, keys = self.r, self.keys
        idle = [t for t, k in keys.items() if not active(k)]
        if not idle:
            return
        if self.ns.node:
            self._share(self.ns.node)
        buf = io.BytesIO()
        packer = _Packer(buf, self.shared_ids, r.interner.ids)
        for tablet in idle:
            k = keys.pop(tablet)
            r.concretize(k)
            st = r.states.tuples[k.state] if k.state >= 0 else None
            k.state = -1  # an id means nothing out of this replayer's tables
            buf.seek(0)
            buf.truncate()
            packer.clear_memo()
            packer.tablet = tablet
            packer.dump((st, _KEY_VALUES(k)))
            if not self.zdict:
                self.zdict = buf.getvalue()
            z = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, self.zdict)
            self.packed[tablet] = z.compress(buf.getbuffer()) + z.flush()

    def unpacked(self, tablet: str, blob: bytes) -> KeyState:
        """A packed key as an object again (the packed bytes are left as they are)."""
        z = zlib.decompressobj(zdict=self.zdict)
        st, values = _Unpacker(io.BytesIO(z.decompress(blob) + z.flush()), self.shared,
                               self.r.interner.names, tablet).load()
        k = KeyState(*values)
        if st is not None:
            k.state = self.r.states.intern(st)
        return k

    def unpack(self, tablet: str) -> KeyState | None:
        blob = self.packed.pop(tablet, None)
        if blob is None:
            return self.keys.get(tablet)
        k = self.keys[tablet] = self.unpacked(tablet, blob)
        return k

    def unpack_all(self) -> None:
        for tablet in list(self.packed):
            self.unpack(tablet)

    def holds(self, tablet: str) -> bool:
        return tablet in self.keys or tablet in self.packed

    def _new_key(self, old: KeyState | None, tablet: str, node: str) -> KeyState:
        if old is None:
            old = self.unpack(tablet)
            if old is not None and old.node == node:
                return old
        return super()._new_key(old, tablet, node)

    def _begin(self, f: str, line: int, first: Envelope) -> None:
        self.unpack_all()  # an incarnation's start steps every key
        super()._begin(f, line, first)

    def close_file(self, feed: SeqFeed) -> None:
        self.unpack_all()  # a file's end reads every key (end_file, _file_end)
        super().close_file(feed)

    def _catalog_replica(self, ev: Envelope) -> ReplicaView | None:
        self.unpack(CATALOG_TABLET)
        return super()._catalog_replica(ev)


_EXACT: Final = 1 << 53  # every int below it in magnitude is a float exactly


class _Packer(pickle.Pickler):
    """Pickles a key with the strings the replay shares by reference: the key's tablet,
    the node's strings (``_FollowedNode.shared``) and the UUIDs the replay interned. A key
    holds the same few strings many times (its files in its window and its per-term
    tables, its UUID in its facts), and unpickled afresh each would be a string of its
    own, in the key and in every fact it flushes into the global tables. Likewise an int
    beyond CPython's cached small ones (a clock, a line number: several fields of a key
    hold the same one, ``appends`` and ``tappends`` say), which pickle does not memoise:
    it is packed as a reference (the value as a float: exact below 2**53; a larger one is
    packed as itself), and unpacked once per key.
    """

    def __init__(self, buf: io.BytesIO, shared: dict[str, int], uuids: dict[str, int]
                 ) -> None:
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared = shared
        self.uuids = uuids
        self.tablet = ""

    def persistent_id(self, obj: Any) -> int | float | None:
        if type(obj) is not str:
            if type(obj) is int and not -6 < obj < 257 and -_EXACT < obj < _EXACT:
                return float(obj)
            return None
        if obj is self.tablet:
            return -1
        got = self.shared.get(obj)
        if got is not None:
            return got
        got = self.uuids.get(obj)
        return None if got is None else -2 - got


class _Unpacker(pickle.Unpickler):
    """``_Packer``'s bytes back, the strings by reference resolved."""

    def __init__(self, buf: io.BytesIO, shared: list[str], uuids: list[str], tablet: str
                 ) -> None:
        super().__init__(buf)
        self.shared = shared
        self.uuids = uuids
        self.tablet = tablet
        self.ints: dict[int, int] = {}

    def persistent_load(self, pid: Any) -> str | int:
        if type(pid) is float:
            value = int(pid)
            return self.ints.setdefault(value, value)
        at: int = pid
        if at >= 0:
            return self.shared[at]
        return self.tablet if at == -1 else self.uuids[-2 - at]


@attrs.define
class _Group:
    """One node's files in the order the batch check replays them (incarnation, path),
    the one being read (``cur``, fed through ``feed``) and its replay."""

    node: str
    replay: _FollowedNode
    files: list[_Tail] = attrs.Factory(list)
    cur: int = 0
    feed: SeqFeed | None = None
    # Polls in a row that fed the node no line (``_pack``).
    idle_polls: int = 0
    max_clock: int = -1  # the highest clock read in order in any of its files
    # The highest wall clock (ns) of the last line of each chunk read: a node's lines are
    # appended in wall-clock order up to clock steps, so this is about its newest line's.
    wall_ns: int = 0

    def add(self, t: _Tail) -> None:
        """A file of the node: in incarnation order among those not begun (one of a lower
        incarnation than the current file's, a late arrival, is replayed next)."""
        at = len(self.files)
        while at > self.cur + (self.feed is not None) and \
                (self.files[at - 1].inc, self.files[at - 1].path) > (t.inc, t.path):
            at -= 1
        self.files.insert(at, t)

    def advance(self, final: bool, close_last: bool = True) -> bool:
        """Feed the current file's new lines; close it and go on while a later file of the
        node exists (or ``final``: with ``close_last`` False the last file is read to its
        end, torn tail included, but left open; ``finish``). True when a line was fed."""
        fed = False
        while self.cur < len(self.files):
            t = self.files[self.cur]
            if self.feed is None:
                self.feed = self.replay.open_file(t.path)
                if t.held:
                    self.replay.push_lines(self.feed, t.held)
                    self.wall_ns = max(self.wall_ns, _wall_ns(t.held[-1]))
                    t.held = []
                    fed = True
            over = final or self.cur + 1 < len(self.files)
            for chunk in t.read(over):
                self.replay.push_lines(self.feed, chunk)
                self.wall_ns = max(self.wall_ns, _wall_ns(chunk[-1]))
                fed = True
                self._pack(self.feed, PACK_LINES)
            self.max_clock = max(self.max_clock, self.feed.order.lamport or -1)
            if not over or (not close_last and self.cur + 1 == len(self.files)):
                break
            self.replay.close_file(self.feed)
            self.feed = None
            t.done = True
            self.cur += 1
        self.idle_polls = 0 if fed else self.idle_polls + 1
        if self.feed is not None:
            self._pack(self.feed, PACK_LINES if self.idle_polls < 2 else 0)
        return fed

    def _pack(self, feed: SeqFeed, recent: int) -> None:
        """Pack the keys whose last event is not among the current file's last ``recent``
        lines (``_FollowedNode``): after each chunk, so a long file read at once holds
        as objects only the keys of its last lines; and after each poll, all of them
        once the node has written nothing for two polls. A key's last event is its
        window's newest entry; one of an earlier file is idle."""
        since = feed.line - recent
        f = feed.file

        def active(k: KeyState) -> bool:
            return bool(k.window) and k.window[-1][0] == f and k.window[-1][1] > since

        self.replay.pack_idle(active)

    def horizon(self) -> float:
        """The clock below which this node writes nothing more in its current
        incarnation: its last clock read in order; infinite once it logged server_stop
        (a clean end: nothing follows) or when it has no file being read."""
        if self.feed is None or self.feed.stop_line:
            return float("inf")
        run = self.running()
        return -1 if run is None else run[2]

    def running(self) -> tuple[int, int, int] | None:
        """(incarnation, first clock, last clock) of the file being read, if it has
        released an event in order (``FileOrder``)."""
        if self.feed is None:
            return None
        o = self.feed.order
        if o.inc is None or o.first_lamport is None or o.lamport is None:
            return None
        return o.inc, o.first_lamport, o.lamport


@attrs.define
class Follower:
    """The batch check (``LocalChecker``) fed as files grow: ``poll`` reads what is new,
    ``finish`` gives the verdict on the files as they are. ``on_finding`` hears each
    finding once, as it is found (module docstring: when)."""

    paths: list[str]
    max_frontier: int = DEFAULT_MAX_FRONTIER
    catalog: CatalogSpec = CATALOG_SPEC
    on_finding: Callable[[Violation], None] | None = None
    global_every: float = GLOBAL_EVERY  # seconds between two judgements of the globals
    # Where the facts go instead of ``globals_`` (the Spark checkpoint's tasks send them
    # to the driver, which holds the global tables: checker/spark_resume.py).
    fact_tap: Callable[[GlobalFact], None] | None = None
    # A judgement waits at least this many times as long as the last one took, so that
    # judging takes at most 1 / (1 + factor) of the follower's time on a large state.
    judge_factor: float = 4.0
    replayer: Replayer = attrs.field(init=False)
    globals_: GlobalChecks = attrs.field(init=False, factory=GlobalChecks)
    report: Report = attrs.field(init=False, factory=lambda: Report(engine="local"))
    tails: dict[str, _Tail] = attrs.field(init=False, factory=dict)
    groups: dict[str, _Group] = attrs.field(init=False, factory=dict)
    # Identities of the findings told to ``on_finding``, and of the global ones among them.
    told: set[tuple[str, str]] = attrs.field(init=False, factory=set)
    told_global: dict[tuple[str, str], Violation] = attrs.field(init=False, factory=dict)
    # Global findings seen but not yet told -> the highest clock read when first seen.
    pending: dict[tuple[str, str], float] = attrs.field(init=False, factory=dict)
    facts_seen: int = attrs.field(init=False, default=0)  # facts merged (``_Counting``)
    # Polls that fed lines (new facts, or clocks moved on), and their count at the last
    # judgement of the global findings.
    fed: int = attrs.field(init=False, default=0)
    fed_judged: int = attrs.field(init=False, default=0)
    judged_at: float = attrs.field(init=False, default=0.0)
    # Seconds the last judgement took (``judge_factor``).
    judge_cost: float = attrs.field(init=False, default=0.0)
    finished: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self.replayer = Replayer(max_frontier=self.max_frontier)
        self.globals_.catalog.rules = self.catalog.global_rules
        self.globals_.max_frontier = self.max_frontier

    @property
    def newest_wall_ns(self) -> int:
        """The wall clock of the newest line read, over every node (0: none yet): the
        follower's lag is now minus this (impl/cli/follow_web.py)."""
        return max((g.wall_ns for g in self.groups.values()), default=0)

    # -- reading ----------------------------------------------------------------------

    def poll(self) -> bool:
        """Read every file's new whole lines and replay them; tell new findings. True when
        anything grew (a new file, a longer one)."""
        grew = self._discover(final=False)
        for t in self.tails.values():
            grew = t.grew() or grew
        self._assign(final=False)
        for g in self._in_order():
            if g.advance(final=False):
                self.fed += 1
        self._troubles(final=False)
        self._judge_globals()
        return grew

    def finish(self, judge: bool = True) -> Report:
        """The verdict on the files as they are now: every file read to its end (torn
        tails included), every node ended as ``stream_node`` ends it, the global checks
        (not with ``judge`` False: another holds the global tables, ``fact_tap``).
        The follower is spent afterwards (its keys are finished)."""
        assert not self.finished, "finish() twice"
        self.finished = True
        self._discover(final=True)
        self._assign(final=True)
        r, report = self.replayer, self.report
        # Two passes. First every line is replayed, each node's last file left open
        # (closing it unpacks every key of the node: ``close_file``). Then, the memo
        # tables dropped (no line is left to replay but those ``FileOrder`` holds: about
        # 7 MB at 10,000 keys), node by node its file is closed, its keys finished, their
        # facts merged into the global tables, and dropped, as the batch check drops a
        # node's keys once it is done. So the final tables grow into the memory the memo
        # tables held, and one node's keys are objects at a time.
        for g in self._in_order():
            g.advance(final=True, close_last=False)
            g.replay.pack_idle(lambda k: False)  # those of its last lines
        r.drop_tables()
        for g in self._in_order():
            g.advance(final=True)  # its files closed: every key unpacked (close_file)
            for k in g.replay.keys.values():
                r.finish_key(k)
                drain_facts(r, _Counting(self))
            for tablet, blob in g.replay.packed.items():
                r.finish_key(g.replay.unpacked(tablet, blob))
                drain_facts(r, _Counting(self))
            g.replay.keys.clear()
            g.replay.packed.clear()
            r.drop_tables()  # the states of the node's keys, interned to finish them
            report.server_events += g.replay.stats.server_events
            report.keys += g.replay.stats.keys
        self._troubles(final=True)  # (finish_key makes facts, never findings)
        self.on_finding, tell = None, self.on_finding  # the verdict lists the rest
        for v in self.globals_.violations() if judge else ():
            self._add(v)
        self.on_finding = tell
        for ident, v in self.told_global.items():
            if ident not in report.findings and not _folded(v, report):
                self._tell(attrs.evolve(v, severity="withdrawn"))
        report.events = r.events
        report.coverage = dict(r.coverage)
        report.frontiers = dict(r.frontiers)
        report.files = len(self.tails)
        return report

    def _troubles(self, final: bool) -> None:
        """A file that shrank, at once (the check cannot be the batch check's any more);
        a file that could not be opened, at the end (it may be being created)."""
        for t in self.tails.values():
            if t.trouble is not None and not t.told and (final or
                                                         t.trouble[0] == "FileShrank"):
                t.told = True
                self._add(from_input_error(InputError(t.trouble[0], t.path, 0, "path",
                                                      t.trouble[1])))

    def _discover(self, final: bool) -> bool:
        files, errors = discover(self.paths)
        if final:  # a directory still empty, a path gone: the batch check's findings
            for e in errors:
                self._add(from_input_error(e))
        new = [f for f in files if f not in self.tails]
        for f in new:
            self.tails[f] = _Tail(f)
        return bool(new)

    def _assign(self, final: bool) -> None:
        """Give each new file its node (``group_files``' rules): the node and incarnation
        of its first decodable line; for a file with none (empty, or only a torn or
        malformed line), those of its name if that node has files (only at the end, or once
        a later incarnation of that node shows it is over); else a group of its own."""
        waiting = sorted((t for t in self.tails.values() if t.group is None),
                         key=lambda t: t.path)
        for t in waiting:
            head = t.read_head(final)
            if head is not None:
                t.head = True
                self._join(t, *head)
        for t in waiting:
            if t.group is not None:
                continue
            named = name_incarnation(t.path)
            g = self.groups.get(named[0]) if named is not None else None
            if named is not None and g is not None and \
                    (final or any(o.inc > named[1] for o in g.files if o.head)):
                self._join(t, *named)
            elif final:
                t.group = "?" + t.path
                g = self.groups[t.group] = self._group("")
                g.add(t)

    def _join(self, t: _Tail, node: str, inc: int) -> None:
        """``t`` is incarnation ``inc`` of ``node``; a second file of one incarnation is
        ``DuplicateIncarnation`` and is not replayed (``group_files``)."""
        t.inc = inc
        g = self.groups.get(node)
        if g is None:
            g = self.groups[node] = self._group(node)
        twin = next((o for o in g.files if o.inc == inc), None)
        t.group = node
        if twin is not None:
            t.done = True
            t.held = []
            self._add(from_input_error(InputError(
                "DuplicateIncarnation", t.path, 0, "inc",
                f"node {node} incarnation {inc} is also in {twin.path}; this file "
                "is not checked (one file per incarnation)")))
            return
        g.add(t)

    def _group(self, node: str) -> _Group:
        nr = _FollowedNode(self.replayer, _Counting(self), self._add, self.catalog)
        nr.live_keys = self._live_keys
        return _Group(node, nr)

    def _in_order(self) -> list[_Group]:
        """The batch check's order: nodes sorted, then the files of no node."""
        return [self.groups[n] for n in sorted(self.groups, key=lambda n: (n[:1] == "?", n))]

    def _live_keys(self) -> Iterator[KeyState]:
        for g in self.groups.values():
            yield from g.replay.keys.values()

    # -- findings ---------------------------------------------------------------------

    def _add(self, v: Violation) -> None:
        self.report.add(v)
        ident = v.identity()
        if ident in self.report.findings:
            self._tell(v)

    def _tell(self, v: Violation) -> None:
        ident = v.identity()
        if ident in self.told and v.severity != "withdrawn":
            return
        self.told.add(ident)
        if self.on_finding is not None:
            self.on_finding(v)

    def _judge_globals(self) -> None:
        """Tell the global findings that already stand (module docstring), at most every
        ``global_every`` seconds and only when lines were fed since the last time."""
        now = time.monotonic()
        if self.fed == self.fed_judged or \
                now - self.judged_at < max(self.global_every,
                                           self.judge_factor * self.judge_cost):
            return
        self.fed_judged, self.judged_at = self.fed, now
        self._judge()
        self.judge_cost = time.monotonic() - now

    def _judge(self) -> None:
        """Tell each global finding that stands now and that no unread line can bear on
        any more: every node bearing on it has written past the highest clock read when
        it first appeared (the lines that prove it are at or below that clock, and each
        node's clocks increase along its file)."""
        top = max((g.max_clock for g in self.groups.values()), default=-1)
        found, bearing = self._provisional_findings()
        for ident in [i for i in self.pending if i not in found]:
            del self.pending[ident]
        for ident, groups in bearing.items():
            seen = self.pending.setdefault(ident, top)
            if groups is not None and all(g.horizon() > seen for g in groups):
                del self.pending[ident]
                self.told_global[ident] = found[ident]
                self._tell(found[ident])

    def _provisional_findings(self) -> tuple[dict[tuple[str, str], Violation],
                                             dict[tuple[str, str], list[_Group] | None]]:
        """The provisional global findings (``provisional``), judged shard by shard
        (``_judge_shards``), and for those not told yet the nodes bearing on them
        (``_bearing``), by identity."""
        found: dict[tuple[str, str], Violation] = {}
        bearing: dict[tuple[str, str], list[_Group] | None] = {}
        for grp in self.groups.values():
            # Every key packed first: its bytes are the copy ``finish_key`` flushes, and
            # the keys still objects (those of the last lines) go out of memory for the
            # judgement, when the pending facts are in it.
            grp.replay.pack_idle(lambda k: False)
        shards, held = self._judge_shards()
        for shard in shards:
            with self.provisional(shard, held) as (tables, provisional):
                for v in provisional:
                    ident = v.identity()
                    # A finding about a tablet of another shard is that shard's to judge
                    # (here its pending facts are not merged); one of no tablet, or of a
                    # tablet no key holds, is the same in every shard.
                    if ident in found or (v.tablet in held and v.tablet not in shard):
                        continue
                    found[ident] = v
                    if ident not in self.told:
                        bearing[ident] = self._bearing(v, tables)
        return found, bearing

    def _judge_shards(self) -> tuple[list[set[str]], set[str]]:
        """The tablets held (every key packed), cut into shards of at most ``JUDGE_KEYS``
        keys (a tablet of more keys is a shard of its own), in tablet order; and the
        tablets held. A judgement merges one shard's pending facts at a time.

        Why a shard is judged alone exactly: every global check of a tablet reads only
        that tablet's entries of the tables (keyed by tablet first) and the tables per
        node (incarnations, blind ones, formats), and every kind of pending fact is
        about one tablet (``global_checks.Journal`` takes no other kind). So a tablet's
        findings with its shard's pending facts merged are its findings with every
        key's merged. The memory of a judgement is then the tables plus one shard's
        facts, not every key's (the batch check's final tables), at the cost of
        reading the tables once per shard."""
        per_tablet: dict[str, int] = {}
        for grp in self.groups.values():
            for tablet in grp.replay.packed:
                per_tablet[tablet] = per_tablet.get(tablet, 0) + 1
        shards: list[set[str]] = []
        cur: set[str] = set()
        n = 0
        for tablet in sorted(per_tablet):
            if cur and n + per_tablet[tablet] > JUDGE_KEYS:
                shards.append(cur)
                cur, n = set(), 0
            cur.add(tablet)
            n += per_tablet[tablet]
        shards.append(cur)
        return shards, set(per_tablet)

    def _pending_facts(self, grp: _Group, tablets: set[str] | None = None
                       ) -> Iterator[GlobalFact]:
        """The facts ``finish_key`` would flush for each of the node's keys now (only
        those of ``tablets``, if given), on a copy of the key: its packed bytes unpacked
        (``provisional`` packs every key first), one at a time. None is kept (keeping
        them for the keys that did not change since cost as much memory as the keys
        themselves)."""
        r = self.replayer
        assert not grp.replay.keys, "provisional packs every key"
        for tablet, blob in grp.replay.packed.items():
            if tablets is not None and tablet not in tablets:
                continue
            r.finish_key(grp.replay.unpacked(tablet, blob))
            yield from r.facts
            r.facts.clear()

    def _bearing(self, v: Violation, tables: GlobalChecks) -> list[_Group] | None:
        """The nodes whose unread lines may bear on a global finding: those holding its
        tablet or named by its tablet's events (``GlobalChecks.named``: configs,
        candidates, copy sources); every node for a finding of no tablet. None while a
        node so named has no file yet (its lines are all unread)."""
        if not v.tablet:
            return list(self.groups.values())
        named = tables.named.get(v.tablet, set())
        if any(n not in self.groups for n in named):
            return None
        return [g for g in self.groups.values()
                if g.node in named or g.replay.holds(v.tablet)]

    @contextlib.contextmanager
    def provisional(self, tablets: set[str] | None = None, held: Container[str] = ()
                    ) -> Iterator[tuple[GlobalChecks, list[Violation]]]:
        """The global findings on the facts so far, with the tables they were read from
        (valid inside the ``with``): every key's pending facts flushed as if it ended
        now (with ``tablets``, one shard of ``_judge_shards``: only the keys of those
        tablets, and only the findings of those tablets and of any not in ``held``),
        every running incarnation taken as crashed right after its last line (the
        widest excuse its crash could still give). They are merged into the follower's
        own tables and taken back after (``global_checks.Journal``): a copy of the tables
        would double their memory for the time of a judgement."""
        r, g = self.replayer, self.globals_
        assert not r.facts, "the facts are drained after every push"
        journal = Journal(g)
        try:
            for grp in self.groups.values():
                grp.replay.pack_idle(lambda k: False)  # (``_pending_facts`` reads bytes)
            for grp in self.groups.values():
                for f in self._pending_facts(grp, tablets):
                    journal.fact(f)
                run = grp.running()
                if run is not None:
                    journal.incarnation(grp.node, *run)
            only = None if tablets is None else (
                lambda tablet: tablet in tablets or tablet not in held)
            yield g, g.violations(only)
        finally:
            journal.undo()


@attrs.define
class _Counting:
    """The global tables as a ``FactSink``, counting the facts (a change to judge)."""

    fol: Follower

    def fact(self, f: GlobalFact) -> None:
        self.fol.facts_seen += 1
        if self.fol.fact_tap is not None:
            self.fol.fact_tap(f)
        else:
            self.fol.globals_.fact(f)


def _folded(v: Violation, report: Report) -> bool:
    """Whether the verdict holds ``v`` folded into another finding (``Report.add``: one
    fault seen by several checks is one finding, at one of its lines)."""
    return any((f.file, f.line) == (v.file, v.line) or v.kind in f.also
               for f in report.findings.values())


def _head(lines: Iterable[bytes]) -> tuple[str, int] | None:
    """(node, incarnation) of the first line that decodes (``traces.first_envelope``)."""
    for raw in lines:
        try:
            ev = _HEAD.decode(raw)
        except msgspec.MsgspecError:
            continue
        return ev.node, ev.inc
    return None


def follow(paths: list[str], on_finding: Callable[[Violation], None],
           stop: Callable[[], bool], until_idle: float | None = None,
           interval: float = 0.15, max_frontier: int = DEFAULT_MAX_FRONTIER,
           progress: Callable[[str], None] | None = None,
           progress_seconds: float = 5.0) -> Report:
    """Follow ``paths`` until ``stop()`` (a signal) or, with ``until_idle``, until no file
    grew for that many seconds; then the final verdict. ``progress`` hears a line about
    every ``progress_seconds``."""
    fol = Follower(paths, max_frontier=max_frontier, on_finding=on_finding)
    fol.poll()
    if progress is not None:
        progress(f"trace follow: following {len(fol.tails)} files under {len(paths)} "
                 "path(s)")
    last = tick = time.monotonic()
    while not stop():
        if fol.poll():
            last = time.monotonic()
        elif until_idle is not None and time.monotonic() - last >= until_idle:
            break
        now = time.monotonic()
        if progress is not None and now - tick >= progress_seconds:
            tick = now
            progress(f"trace follow: {len(fol.tails)} files, {fol.replayer.events:,} "
                     f"events, {len(fol.report.findings)} findings, idle "
                     f"{now - last:.0f} s")
        time.sleep(interval)
    return fol.finish()


__all__ = ["Follower", "follow"]
