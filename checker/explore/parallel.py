"""``explore(..., workers=N)``: the breadth-first search on N processes.

Every worker process holds a ``node.Node`` (its own ``Explorer``, caches and interning) and
every state: the visited set is replicated, and the work is divided by *server*, not by
state. A level, driven by the coordinator (the calling process):

1. each worker expands its share of every state of the frontier (below) with the single
   process's expansion (``Search._expand_plain``) into its ``seen`` dict: its *found*
   states, new to it;
2. routing: it sends each found state to the state's *owner* (``Node.owner``: a function of
   the state's orbit, the same in every process), keeps those it owns, and takes in those
   the peers found that it owns. The owner alone tells whether a state is new to the
   level, counts its servers' orbits (for the next level's share) and checks its
   invariants, so each of those per-state passes is made once per state, not by every
   worker for nearly every state;
3. delivery: each owner sends every peer the new states it owns that the peer did not find
   (the peer did not route it to the owner), with its orbit counts; so every worker ends
   the level with the same next frontier, visited set and counts, each in its own
   numbering and order;
4. it tells the coordinator how many new states the level has, and any violation.

Each of the two rounds is one message per peer per level, empty or not, so a receiver knows
when the round is in; each round has its own queue, as a fast peer's delivery may come
before a slow one's routing. Between two workers each new state crosses exactly once (to
its owner when the other found it, else from its owner, delivered), where sending every
found state to every peer made each worker merge nearly all the others found.

Sharing the work
----------------
Worker w expands server i of a state S when the orbit of S's server i's state (``Node.orbit``,
the same in every process) is assigned to w. The caches the search spends most of its time
filling (a server state's plan, its moves among each neighbourhood of other servers, its
guards, effects and step verdicts) are keyed on that server state, so each is built by one
worker, instead of by every worker for nearly every server state, which is what made the
earlier partition by state (each worker expanding whole states) slower than one process.

The share is exact. Each worker holds S in its own canonical arrangement, a permutation p
of any other's, whose server p(j) is server j relabelled by p: an orbit-preserving
bijection of the positions, so the servers of S one worker expands correspond one for one
to those the others leave out, and the moves of server j of S are the moves of server p(j)
of p.S (the package's theory, "Symmetry reduction", (2)). Hence each (state, server) pair
of a level is expanded exactly once, and the transitions and coverage summed over the
workers are one process's; the levels are the same sets (``node``'s docstring).

The assignment (``Share``): an orbit's default worker is its digest modulo N; at the start
of each level, every worker holds the count of the frontier's servers in each orbit (each
new state's owner counted its servers, and the delivery summed the owners' counts: the same
counts everywhere, as orbits do not depend on the arrangement) and moves orbits from the
busiest worker to the idlest while the busiest holds more than 1% over the mean. Every
worker computes the same moves from the same counts, so all agree on every assignment
without a message.

Messages name a state by the sender's key (its canonical packed sids) and carry the sids the
sender interned since its last message, as stable bytes (``codec.encode_server``): the
receiver keeps a per-sender translation table to its own sids, and a generated function
(``Node.translator``) turns a sender's key into its own canonical key in one call (each sid
translated, the canonical packing inline). So no message, no owner and no share depends on
process-local numbering or on a salted hash.

Parents. ``seen`` maps a state to how it was reached: -1 the initial state; a key >= 0, a
state of this worker's frontier (the single process's parent link); -(2 + parent * N + w)
for a state whose parent is the state with key ``parent`` at worker w. Messages carry the
links in the second form, so an owner passes on a link it received as it is. A
counterexample is walked back across the workers from the violating state to the initial
one, then replayed like the single process's (``counterexample.replay``).

The collector is off in the workers as in one process (``collector``), from a worker's start
to its exit (``_worker``).

Start and end: wall time one process does not spend. The fork server's start (an
interpreter, the imports, ``warm``) runs while the coordinator builds its own Explorer, not
after it; at the end a worker leaves without a last collection or freeing its objects one by
one (``_worker``): its process's memory goes back whole.
"""

from __future__ import annotations

import bisect
import collections
import gc
import multiprocessing
import multiprocessing.forkserver
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any, Final

import attrs

from revivify.spec.actions import Bounds
from revivify.spec.system import Spec

from .codec import decode_server
from .counterexample import replay
from .engine import Explorer
from .node import (
    Node,
    SpecSource,
    distributed_result,
    initial_violation,
    property_docs,
    require_plain,
)
from .results import ExploreProgress, ExplorerError, ExploreResult, ExploreViolation

# forkserver: workers fork from a clean server process (no inherited threads or open files
# of the caller) that has imported the explorer and compiled the stock spec once (``warm``).
START_METHOD: Final = "forkserver"
PRELOAD: Final = ["revivify.checker.explore.warm"]
ROOT: Final = -1


@attrs.frozen
class _Level:
    """A worker's answer at the end of a level."""

    found: int  # states it owns at the new level
    capped: bool  # it stopped expanding at max_states
    violation: tuple[int, str, str] | None  # (key, kind, name)
    transitions: int  # so far (when progress is reported), else 0


def explore_parallel(
    spec: Spec,
    bounds: Bounds,
    workers: int,
    *,
    max_states: int | None = None,
    progress: Callable[[ExploreProgress], None] | None = None,
    symmetry: bool = True,
    verify: bool = False,
) -> ExploreResult:
    """The search on ``workers`` processes (see the module's docstring). ``max_states``:
    each worker stops expanding once the states it holds (every worker holds them all)
    reach it; the level is still exchanged."""
    if workers < 1:
        raise ValueError("workers must be >= 1")
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    source = SpecSource.of(spec)
    ctx = multiprocessing.get_context(START_METHOD)
    ctx.set_forkserver_preload(PRELOAD)
    # The fork server starts now, in the background: its interpreter's start, imports and
    # ``warm`` (about 1.5 s, which a worker's start waits for) overlap the building of this
    # process's own Explorer (about 0.9 s), where one after the other they were wall time
    # that one process does not spend.
    multiprocessing.forkserver.ensure_running()
    ex = Explorer(spec, bounds, symmetry, False)
    require_plain(ex)
    early = initial_violation(spec, ex, t0, cpu0, symmetry, "local", workers)
    if early is not None:
        return early
    cap = max_states  # every worker knows every state
    inboxes = [(ctx.Queue(), ctx.Queue()) for _ in range(workers)]
    conns: list[Connection] = []
    procs = []
    try:
        for me in range(workers):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker, name=f"revivify-explore-{me}", daemon=True,
                            args=(me, workers, source, bounds, symmetry, verify, cap,
                                  progress is not None, theirs, inboxes))
            p.start()
            theirs.close()
            conns.append(mine)
            procs.append(p)
        coord = _Coordinator(conns, procs)
        levels = [1]
        transitions = 0
        violation_at: tuple[int, int, str, str] | None = None
        capped = False
        while True:
            answers: list[_Level] = coord.ask_all(("level",))
            # every worker ends a level holding the same new states
            found = answers[0].found
            if any(a.found != found for a in answers):
                raise ExplorerError(f"the workers disagree on the level's new states: "
                                    f"{[a.found for a in answers]}")
            if found:
                levels.append(found)
                if progress is not None:
                    transitions = sum(a.transitions for a in answers)
                    progress(ExploreProgress(sum(levels), transitions, len(levels) - 1,
                                             found, time.perf_counter() - t0,
                                             len(levels) - 1))
            capped = any(a.capped for a in answers)
            hit = next(((w, *a.violation) for w, a in enumerate(answers)
                        if a.violation is not None), None)
            if hit is not None:
                violation_at = hit
            if hit is not None or capped or not found:
                break
        violation = None
        if violation_at is not None:
            w, key, kind, name = violation_at
            chain = _walk_back(coord, ex, w, key, workers)
            violation = ExploreViolation(name, kind, replay(ex, chain, (kind, name)),
                                         property_docs(spec).get(name, ""))
        totals: list[tuple[int, list[int], list[int], float]] = coord.ask_all(("finish",))
        coverage = [sum(c) for c in zip(*[t[1] for t in totals], strict=True)]
        transitions = sum(t[0] for t in totals)
        # distinct server states over all workers, by their 64-bit digests (a collision
        # among some 10^5 states has a probability below 10^-9)
        server_states = len(set().union(*[t[2] for t in totals]))
        cpu = time.process_time() - cpu0 + sum(t[3] for t in totals)
        coord.tell_all(("stop",))
        for p in procs:
            p.join(timeout=10)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join()
        for conn in conns:
            conn.close()
        for q in [q for pair in inboxes for q in pair]:
            q.close()
            q.join_thread()
    return distributed_result(spec, t0, sum(levels), transitions, coverage, len(levels) - 1,
                              levels, workers, violation, not capped and violation is None,
                              server_states, symmetry, cpu)


def _walk_back(coord: _Coordinator, ex: Explorer, w: int, key: int,
               workers: int) -> list[int]:
    """The path from the initial state to ``key`` (held by worker ``w``), as keys of the
    coordinator's explorer: each worker names the state's servers and its parent link."""
    chain: list[int] = []
    at: tuple[int, int] | None = (w, key)
    while at is not None:
        encs, cw, parent = coord.ask(at[0], ("state", at[1]))
        chain.append(ex.key([ex.interner.sid(decode_server(e)) for e in encs], cw))
        if parent == ROOT:
            at = None
        elif parent >= 0:
            at = (at[0], parent)
        else:
            ref = -parent - 2
            at = (ref % workers, ref // workers)
    return chain[::-1]


class _Coordinator:
    """The coordinator's side of the workers' control pipes: a worker that fails sends its
    traceback (raised here as an ExplorerError); one that dies fails the search."""

    def __init__(self, conns: list[Connection], procs: list[Any]) -> None:
        self.conns = conns
        self.procs = procs

    def tell_all(self, msg: tuple[Any, ...]) -> None:
        for w in range(len(self.conns)):
            self._send(w, msg)

    def _send(self, w: int, msg: tuple[Any, ...]) -> None:
        try:
            self.conns[w].send(msg)
        except OSError as exc:  # BrokenPipeError, ConnectionResetError: it is gone
            raise self._lost(w, exc) from None

    def _lost(self, w: int, exc: BaseException) -> ExplorerError:
        """Worker ``w``'s pipe broke: it died (say how), or is about to."""
        proc = self.procs[w]
        proc.join(5)
        if proc.exitcode is None:
            return ExplorerError(f"explore worker {w} stopped answering ({exc!r})")
        return ExplorerError(f"explore worker {w} died (exit code {proc.exitcode})")

    def ask_all(self, msg: tuple[Any, ...]) -> list[Any]:
        self.tell_all(msg)
        return [self._answer(w) for w in range(len(self.conns))]

    def ask(self, w: int, msg: tuple[Any, ...]) -> Any:
        self._send(w, msg)
        return self._answer(w)

    def _answer(self, w: int) -> Any:
        conn, proc = self.conns[w], self.procs[w]
        while True:
            ready = wait([conn, *[p.sentinel for p in self.procs]])
            if conn in ready:
                try:
                    tag, body = conn.recv()
                except (EOFError, OSError) as exc:  # it died with its pipe readable
                    raise self._lost(w, exc) from None
                if tag == "error":
                    raise ExplorerError(f"explore worker {w} failed:\n{body}")
                return body
            dead = [k for k, p in enumerate(self.procs) if p.exitcode is not None]
            if dead:
                raise ExplorerError(f"explore worker {dead[0]} died (exit code "
                                    f"{self.procs[dead[0]].exitcode}); worker {w} "
                                    f"{'is alive' if proc.is_alive() else 'too'}")


def _worker(me: int, workers: int, source: SpecSource, bounds: Bounds, symmetry: bool,
            verify: bool, cap: int | None, tally_levels: bool, conn: Connection,
            inboxes: list[Any]) -> None:
    """A worker process: answers the coordinator's commands until ``stop``.

    The worker's collector stays off to the end (``collector`` says why it is off during a
    search), and the worker stays referenced (``_KEPT``) until the process leaves, by the
    fork server child's ``os._exit``: turned back on, the collector's next full collection
    walked every container of the search once more, and freeing the visited set and the
    caches object by object cost as much again: 0.9-1.4 s of wall time at 0.9 million
    states, for which the coordinator waited (it joins its workers before it returns)."""
    gc.disable()
    try:
        worker = _Worker(me, workers, source, bounds, symmetry, verify, cap, tally_levels,
                         conn, inboxes)
        _KEPT.append(worker)
        worker.serve()
    except Exception:
        conn.send(("error", traceback.format_exc()))


_KEPT: Final[list[_Worker]] = []


class _Worker:
    def __init__(self, me: int, workers: int, source: SpecSource, bounds: Bounds,
                 symmetry: bool, verify: bool, cap: int | None, tally_levels: bool,
                 conn: Connection, inboxes: list[tuple[Any, Any]]) -> None:
        self.me = me
        self.workers = workers
        self.cap = cap
        self.tally_levels = tally_levels
        self.conn = conn
        # per worker, its two queues: the states routed to it as their owner (the
        # exchange's first round), and those delivered by their owners (the second)
        self.inboxes = inboxes
        node = self.node = Node(source.build(), bounds, symmetry, verify)
        self.search = node.search
        self.seen = node.search.parents
        # my sids below ``named`` are named to every peer (each message names those
        # interned since the last); per peer, its sids -> mine, and its keys -> mine
        self.named = 0
        self.mine_of: list[list[int]] = [[] for _ in range(workers)]
        self.translate = [node.translator(table) for table in self.mine_of]
        self.owner_of = node.owner_of(workers)
        self.share = Share(me, workers)
        ex = node.ex
        init = ex.key([ex.interner.sid(s) for s in ex.spec.initial()], 0)
        # every worker holds every state; the coordinator checked the initial one
        self.seen[init] = ROOT
        self.frontier: list[int] = [init]
        node.fill()
        # the orbits of the frontier's servers, counted (for ``Share.rebalance``), and
        # those of the new states this worker owns, as the exchange meets them
        self.counts: dict[int, int] = collections.Counter(
            [node.orbit[s] for s in ex.unpack(init)[0]])
        self.orbits: list[int] = []

    def serve(self) -> None:
        while True:
            cmd = self.conn.recv()
            if cmd[0] == "level":
                self.conn.send(("ok", self.level()))
            elif cmd[0] == "state":
                key = cmd[1]
                encs, cw = self.node.servers(key)
                self.conn.send(("ok", (encs, cw, self.seen[key])))
            elif cmd[0] == "finish":
                transitions, coverage = self.search.take_tally()
                self.node.fill()
                self.conn.send(("ok", (transitions, coverage, self.node.digests,
                                       time.process_time())))
            else:
                return

    def level(self) -> _Level:
        """Expand this worker's share of the level, then the exchange (the module's
        docstring): route the new states to their owners, take those routed here,
        deliver to each peer the new states it lacks, take those delivered here."""
        node, seen, search, cap = self.node, self.seen, self.search, self.cap
        me, inboxes = self.me, self.inboxes
        node.fill()
        self.share.rebalance(node.orbit, self.counts)
        found: list[int] = []
        capped = False
        expand, append, owned_sids = search.expand_share, found.append, self.share.owned
        for key in self.frontier:
            if expand(key, append, owned_sids):
                break
            if cap is not None and len(seen) >= cap:
                capped = True
                break
        node.fill()
        peers = [p for p in range(self.workers) if p != me]
        # round 1: each new state to its owner
        routed, owned, violation = self._route(found)
        names = self._names()
        for peer in peers:
            inboxes[peer][0].put((me, names, routed[peer], self._refs(routed[peer])))
        frontier = found
        for _ in peers:
            sender, names, keys, refs = inboxes[me][0].get()
            violation = self._take_routed(sender, names, keys, refs, owned,
                                          frontier) or violation
        # round 2: each peer the states I own that it did not find, and my orbit counts
        names = self._names()
        counts = collections.Counter(self.orbits)
        self.orbits = []
        for peer in peers:
            keys = [k for k, by in owned.items() if not by >> peer & 1]
            inboxes[peer][1].put((me, names, keys, self._refs(keys), counts))
        total = counts.copy()  # (``counts`` is pickled by the queue's thread, later)
        for _ in peers:
            sender, names, keys, refs, theirs = inboxes[me][1].get()
            self._take_delivered(sender, names, keys, refs, frontier)
            total.update(theirs)
        self.frontier = frontier
        self.counts = total
        if search.violation_at is not None:
            chain, (kind, name) = search.violation_at
            violation = (chain[0], kind, name)
        transitions = search.tally(False) if self.tally_levels else 0
        return _Level(len(frontier), capped, violation, transitions)

    def _route(self, found: list[int]) -> tuple[list[list[int]], dict[int, int],
                                                 tuple[int, str, str] | None]:
        """The states this worker found, by owner: per peer those it owns; those I own
        (-> the peers that found them too: none yet), their orbits counted and their
        invariants checked (the first that fails, else None)."""
        me = self.me
        routed: list[list[int]] = [[] for _ in range(self.workers)]
        owned: dict[int, int] = {}
        owner_of, orbit_of = self.owner_of, self.node.orbit.__getitem__
        checks = self.node.ex.checks
        state_ok, every = checks.state_ok, self.orbits.extend
        shift_c, unpack = self.search._shift_c, self.search._unpack
        violation = None
        for key in found:
            w = owner_of(key)
            if w != me:
                routed[w].append(key)
                continue
            owned[key] = 0
            sids = unpack(key >> shift_c)
            every(map(orbit_of, sids))
            if not state_ok(sids):
                violation = violation or (key, "invariant", checks.state_failures(sids)[0])
        return routed, owned, violation

    def _names(self) -> tuple[int, list[bytes]]:
        """My sids interned since the last message, named as stable bytes: (the first
        one, their encodings)."""
        encs, start = self.node.encs, self.named
        self.named = len(encs)
        return start, encs[start:]

    def _learn(self, sender: int, names: tuple[int, list[bytes]]) -> Callable[[int], int]:
        """Take in the sids ``sender`` names (in the order it interned them); its
        translator of keys."""
        start, encs = names
        table = self.mine_of[sender]
        if start != len(table):
            raise ExplorerError(f"worker {sender} named sids from {start}, "
                                f"{len(table)} expected")
        table.extend(map(self.node.sid, encs))
        return self.translate[sender]

    def _refs(self, keys: list[int]) -> list[int]:
        """The parent links of my ``keys``, as links any worker can follow: a parent in my
        frontier becomes -(2 + its key * N + me)."""
        me, n = self.me, self.workers
        return [-(2 + p * n + me) if p >= 0 else p for p in map(self.seen.__getitem__, keys)]

    def _take_routed(self, sender: int, names: tuple[int, list[bytes]], keys: list[int],
                     refs: list[int], owned: dict[int, int],
                     frontier: list[int]) -> tuple[int, str, str] | None:
        """New states ``sender`` found that I own: each is new to the level (it joins my
        frontier, its orbits counted, its invariants checked: the first that fails, else
        None) or one this level's exchange already brought me; either way ``owned``
        records that ``sender`` has it."""
        translate = self._learn(sender, names)
        seen, bit = self.seen, 1 << sender
        orbit_of, checks = self.node.orbit.__getitem__, self.node.ex.checks
        state_ok, every, append = checks.state_ok, self.orbits.extend, frontier.append
        shift_c, unpack = self.search._shift_c, self.search._unpack
        violation = None
        for k, ref in zip(keys, refs, strict=True):
            mine = translate(k)
            by = owned.get(mine)
            if by is not None:
                owned[mine] = by | bit
                continue
            if mine in seen:  # a state of an earlier level: every worker held it
                raise ExplorerError(f"worker {sender} found a state of an earlier level")
            seen[mine] = ref
            owned[mine] = bit
            append(mine)
            sids = unpack(mine >> shift_c)
            every(map(orbit_of, sids))
            if not state_ok(sids):
                violation = violation or (mine, "invariant", checks.state_failures(sids)[0])
        return violation

    def _take_delivered(self, sender: int, names: tuple[int, list[bytes]], keys: list[int],
                        refs: list[int], frontier: list[int]) -> None:
        """New states that ``sender`` owns and I did not find: they join my frontier
        (their owner counted and checked them)."""
        translate = self._learn(sender, names)
        seen, append = self.seen, frontier.append
        for k, ref in zip(keys, refs, strict=True):
            mine = translate(k)
            if mine in seen:
                raise ExplorerError(f"worker {sender} delivered a state I hold")
            seen[mine] = ref
            append(mine)


class Share:
    """Which worker expands the servers in which server states (the module's docstring,
    "Sharing the work"): all the server states of one orbit go to one worker, by default
    the one its digest names; orbits move between workers to even out the servers each
    has in the frontier (``rebalance``). Every worker keeps its own copy and makes the
    same moves from the same counts, so all agree on every assignment."""

    # The busiest worker may hold this much more than the mean before orbits move. A level
    # waits for its slowest worker, so every point of imbalance is wall time; a moved orbit's
    # caches are built again by its new worker, but at 1% (against 5%) two workers at the
    # default bounds built 45 more plans in all (14,127, against 14,082: 0.3%) while the
    # slower one's server states over the levels fell from 1.029x the mean to 1.0025x.
    TOLERANCE: Final = 0.01
    # a frontier with fewer servers than this moves nothing (too little work to matter)
    MIN_SERVERS: Final = 1000

    def __init__(self, me: int, workers: int) -> None:
        self.me = me
        self.workers = workers
        self.moved: dict[int, int] = {}  # orbit -> its worker, when not its default
        self.members: dict[int, list[int]] = {}  # orbit -> its sids here
        self.owned = bytearray()  # sid -> 1 when this worker expands it

    def worker(self, orbit: int) -> int:
        return self.moved.get(orbit, orbit % self.workers)

    def rebalance(self, orbit: list[int], counts: dict[int, int]) -> None:
        """Take in the sids interned since the last call (``orbit``: sid -> its orbit),
        then move orbits from the busiest worker to the idlest, by the frontier's servers
        in each (``counts``), while a move narrows the gap: the largest orbit no larger
        than half the gap, else the smallest (the counts, then the digests, break ties,
        so every worker picks the same)."""
        owned, members, me = self.owned, self.members, self.me
        for sid in range(len(owned), len(orbit)):
            o = orbit[sid]
            members.setdefault(o, []).append(sid)
            owned.append(self.worker(o) == me)
        total = sum(counts.values())
        if total < self.MIN_SERVERS:
            return
        load = [0] * self.workers
        held: list[list[tuple[int, int]]] = [[] for _ in range(self.workers)]
        for o, c in counts.items():
            w = self.worker(o)
            load[w] += c
            held[w].append((c, o))
        for orbits in held:
            orbits.sort()
        limit = total / self.workers * (1 + self.TOLERANCE)
        for _ in range(len(counts)):
            busy = load.index(max(load))
            idle = load.index(min(load))
            gap = load[busy] - load[idle]
            if load[busy] <= limit:
                break
            orbits = held[busy]
            at = bisect.bisect_right(orbits, (gap // 2, 1 << 64)) - 1
            c, o = orbits[max(at, 0)]
            if c >= gap:
                break  # no move narrows it
            del orbits[max(at, 0)]
            bisect.insort(held[idle], (c, o))
            load[busy] -= c
            load[idle] += c
            self._move(o, idle)

    def _move(self, orbit: int, to: int) -> None:
        was = self.worker(orbit)
        if to == orbit % self.workers:
            self.moved.pop(orbit, None)
        else:
            self.moved[orbit] = to
        if self.me in (was, to):
            flag = to == self.me
            for sid in self.members.get(orbit, ()):
                self.owned[sid] = flag


__all__ = ["START_METHOD", "Share", "explore_parallel"]
