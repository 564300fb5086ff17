"""``explore(..., workers=N)``: the breadth-first search on N processes.

Each worker process holds a ``node.Node`` (its own ``Explorer``, caches and interning) and
owns the states whose orbit hashes to it (``Node.owner``; why the partitioned,
level-synchronous search finds the same states, transitions, coverage and depth as one
process is in ``node``'s docstring). A level, driven by the coordinator (the calling
process):

1. each worker expands the states of its frontier (the level's states it owns) with the
   single process's expansion (``Search._expand_plain``) into its ``seen`` dict, which holds
   the states it owns and those it generated for others (each is sent at most once);
   every state new to it is checked against the invariants there;
2. it sends each other worker the new states that worker owns (one message per peer per
   level, empty or not, so a receiver knows when the level is in), and merges what it
   receives into ``seen``: the states new to it are its next frontier;
3. it tells the coordinator how many states it owns at the new level, and any violation.

Messages name a state by the sender's key (its canonical packed sids) and carry, the first
time the sender names a sid to that peer, the sid's server state as stable bytes
(``codec.encode_server``): the receiver keeps a per-sender translation table to its own sids
and canonicalises the state in its own numbering. So no message and no owner depends on
process-local numbering or on a salted hash.

Parents. ``seen`` maps a state to how it was reached: -1 the initial state; a key >= 0, a
state of this worker's frontier (the single process's parent link); -(2 + parent * N +
sender) for a state received from ``sender``, whose key there was ``parent``. A
counterexample is walked back across the workers from the violating state to the initial
one, then replayed like the single process's (``counterexample.replay``).
"""

from __future__ import annotations

import multiprocessing
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
    capped: bool  # it stopped expanding at its share of max_states
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
    each worker stops expanding once it has seen its share (max_states / workers)."""
    if workers < 1:
        raise ValueError("workers must be >= 1")
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    source = SpecSource.of(spec)
    ex = Explorer(spec, bounds, symmetry, False)
    require_plain(ex)
    early = initial_violation(spec, ex, t0, cpu0, symmetry, "local", workers)
    if early is not None:
        return early
    cap = max_states  # every worker knows every state
    ctx = multiprocessing.get_context(START_METHOD)
    ctx.set_forkserver_preload(PRELOAD)
    inboxes = [ctx.Queue() for _ in range(workers)]
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
        for q in inboxes:
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
        for conn in self.conns:
            conn.send(msg)

    def ask_all(self, msg: tuple[Any, ...]) -> list[Any]:
        self.tell_all(msg)
        return [self._answer(w) for w in range(len(self.conns))]

    def ask(self, w: int, msg: tuple[Any, ...]) -> Any:
        self.conns[w].send(msg)
        return self._answer(w)

    def _answer(self, w: int) -> Any:
        conn, proc = self.conns[w], self.procs[w]
        while True:
            ready = wait([conn, *[p.sentinel for p in self.procs]])
            if conn in ready:
                tag, body = conn.recv()
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
    """A worker process: answers the coordinator's commands until ``stop``."""
    try:
        _Worker(me, workers, source, bounds, symmetry, verify, cap, tally_levels,
                conn, inboxes).serve()
    except Exception:
        conn.send(("error", traceback.format_exc()))


class _Worker:
    def __init__(self, me: int, workers: int, source: SpecSource, bounds: Bounds,
                 symmetry: bool, verify: bool, cap: int | None, tally_levels: bool,
                 conn: Connection, inboxes: list[Any]) -> None:
        self.me = me
        self.workers = workers
        self.cap = cap
        self.tally_levels = tally_levels
        self.conn = conn
        self.inboxes = inboxes
        node = self.node = Node(source.build(), bounds, symmetry, verify)
        self.seen = node.search.parents
        # per peer: the sids already named to it, and its sids -> mine
        self.named: list[bytearray] = [bytearray() for _ in range(workers)]
        self.mine_of: list[list[int]] = [[] for _ in range(workers)]
        # sid -> 1 when this worker expands the servers in that state (its orbit's share)
        self.xown = bytearray()
        ex = node.ex
        init = ex.key([ex.interner.sid(s) for s in ex.spec.initial()], 0)
        # every worker holds every state; the coordinator checked the initial one
        self.seen[init] = ROOT
        self.frontier: list[int] = [init]

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
                transitions, coverage = self.node.search.take_tally()
                self.node.fill()
                self.conn.send(("ok", (transitions, coverage, self.node.digests,
                                       time.process_time())))
            else:
                return

    def level(self) -> _Level:
        """Expand this worker's share of the level, exchange the new states with every
        peer, check the invariants of the new states this worker owns."""
        node, seen = self.node, self.seen
        search = node.search
        self._own_servers()
        found: list[int] = []
        capped = False
        expand, append, xown, cap = search.expand, found.append, self.xown, self.cap
        for key in self.frontier:
            if expand(key, append, xown, False):
                break
            if cap is not None and len(seen) >= cap:
                capped = True
                break
        node.fill()
        parents = [seen[k] for k in found]
        for peer in range(self.workers):
            if peer != self.me:
                self.inboxes[peer].put((self.me, self._names(peer, found), found, parents))
        # (a copy: the queues' feeder threads pickle ``found`` after ``put`` returns)
        frontier = found.copy()
        for _ in range(self.workers - 1):
            sender, names, keys, their_parents = self.inboxes[self.me].get()
            self._merge(sender, names, keys, their_parents, frontier)
        self.frontier = frontier
        violation = None
        if search.violation_at is not None:
            chain, (kind, name) = search.violation_at
            violation = (chain[0], kind, name)
        else:
            violation = self._check(frontier)
        transitions = search.tally(False) if self.tally_levels else 0
        return _Level(len(frontier), capped, violation, transitions)

    def _own_servers(self) -> None:
        """Extend ``xown`` to every sid interned so far: the servers this worker expands
        are those whose state's orbit falls to it (``Node.orbit``, the same in every
        process for every member of an orbit)."""
        node, xown, me, n = self.node, self.xown, self.me, self.workers
        node.fill()
        orbit = node.orbit
        xown.extend([orbit[s] % n == me for s in range(len(xown), len(orbit))])

    def _check(self, frontier: list[int]) -> tuple[int, str, str] | None:
        """The invariants of the level's new states that this worker owns (``Node.owner``:
        each state is checked by one worker), else None; the first failing one."""
        node, me, n = self.node, self.me, self.workers
        checks = node.ex.checks
        state_ok, owner, unpack = checks.state_ok, node.owner, node.ex.unpack
        for key in frontier:
            if owner(key, n) != me:
                continue
            sids, _cw = unpack(key)
            if not state_ok(sids):
                return key, "invariant", checks.state_failures(sids)[0]
        return None

    def _names(self, peer: int, keys: list[int]) -> list[tuple[int, bytes]]:
        """The (sid, stable encoding) of every sid in ``keys`` not yet named to ``peer``."""
        named = self.named[peer]
        encs = self.node.encs
        if len(named) < len(encs):
            named.extend(bytes(len(encs) - len(named)))
        out: list[tuple[int, bytes]] = []
        unpack = self.node.ex.unpack
        for k in keys:
            for s in unpack(k)[0]:
                if not named[s]:
                    named[s] = 1
                    out.append((s, encs[s]))
        return out

    def _merge(self, sender: int, names: list[tuple[int, bytes]], keys: list[int],
               parents: list[int], frontier: list[int]) -> None:
        """The new states ``sender`` found: those new to me join my next frontier."""
        node, seen = self.node, self.seen
        table = self.mine_of[sender]
        for s, enc in names:
            if s >= len(table):
                table.extend([-1] * (s + 1 - len(table)))
            table[s] = node.sid(enc)
        unpack, key_of = node.ex.unpack, node.ex.key
        tag = 2 + sender
        for k, parent in zip(keys, parents, strict=True):
            sids, cw = unpack(k)
            mine = key_of([table[s] for s in sids], cw)
            if mine not in seen:
                seen[mine] = -(tag + parent * self.workers)
                frontier.append(mine)


__all__ = ["START_METHOD", "explore_parallel"]
