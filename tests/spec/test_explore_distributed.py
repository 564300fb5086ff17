"""The explorer on several processes (``--workers``) and as a Spark job (``--engine spark``):
the same states, transitions, coverage and levels as one process, the same first violation
depth under a mutant, counterexamples that replay as real runs."""

from __future__ import annotations

import json
import os
import queue
import threading
from typing import Any, cast

import pytest

from revivify.checker.explore import ExplorerError, ExploreResult, explore, explore_main
from revivify.checker.explore.codec import decode_server, encode_server
from revivify.checker.explore.node import SpecSource
from revivify.checker.explore.parallel import Share, _Worker
from revivify.spec import Spec, default_spec
from revivify.spec.actions import Bounds, replace_action
from revivify.spec.model import ServerState
from revivify.spec.mutants import MUTANTS


class _DiesAtStart(SpecSource):
    """A source whose worker exits as it builds the spec: a worker killed at start-up."""

    def build(self) -> Spec:
        os._exit(3)


SMALL = Bounds(max_term=1, max_index=0, max_crashes=0, max_wipes=0, max_requests=2)
# every budget (a crash, a fault, one request): Moves split by budget mask
TINY_CRASH = Bounds(max_term=1, max_index=0, max_crashes=1, max_wipes=1, max_requests=1)
# Spark: few levels (each is two Spark jobs)
SPARK_BOUNDS = Bounds(max_term=1, max_index=0, max_crashes=1, max_wipes=1, max_requests=0)


def same_counts(a: ExploreResult, b: ExploreResult) -> None:
    assert a.complete and b.complete
    assert (a.distinct_states, a.transitions, a.depth) == (b.distinct_states, b.transitions,
                                                           b.depth)
    assert a.levels == b.levels and sum(a.levels) == a.distinct_states
    assert a.coverage == b.coverage and a.dead_actions == b.dead_actions
    assert a.server_states == b.server_states
    assert a.violation is None and b.violation is None


def replays(spec: Spec, bounds: Bounds, r: ExploreResult) -> None:
    """The counterexample is a run of the spec: each step an enabled move from the one
    before, and its last state or step breaks the named claim."""
    v = r.violation
    assert v is not None
    for before, after in zip(v.trace, v.trace[1:], strict=False):
        moves = {(a.name, i, tuple(p.items()), n)
                 for a, i, p, n in spec.successors(before.state, bounds)}
        assert (after.action, after.server, tuple(after.params.items()), after.state) in moves
    if v.kind == "invariant":
        assert v.invariant in spec.violations(v.trace[-1].state)
    else:
        last = v.trace[-1]
        assert last.server is not None
        assert v.invariant in spec.step_violations(v.trace[-2].state, last.state, last.server)


def mutant_cases() -> list[tuple[str, Bounds, int | None]]:
    """A step property (OperationNeverReplaced, a 5-step run) and state invariants
    (VotesMatchCmeta after 7 steps, LeaderHadMajority after 2), each at its mutant's
    bounds."""
    return [(name, MUTANTS[name].bounds, MUTANTS[name].max_states)
            for name in ("stc_replaces_operation", "tombstone_votes_twice",
                         "leader_without_majority")]


class TestCodec:
    def test_round_trip(self) -> None:
        s = default_spec().initial()[0]
        s2 = ServerState(term=3, voted_for=1, votes=s.votes.set(2, 1), log=s.log.set(1, 2))
        for x in (s, s2):
            assert decode_server(encode_server(x)) == x
        assert encode_server(s) != encode_server(s2)


class TestWorkers:
    @pytest.mark.parametrize("bounds", [SMALL, TINY_CRASH], ids=["small", "budgets"])
    def test_two_workers_count_like_one(self, bounds: Bounds) -> None:
        same_counts(explore(default_spec(), bounds),
                    explore(default_spec(), bounds, workers=2))

    def test_without_symmetry(self) -> None:
        bounds = Bounds(max_term=1, max_index=0, max_crashes=0, max_wipes=0, max_requests=1)
        same_counts(explore(default_spec(), bounds, symmetry=False),
                    explore(default_spec(), bounds, symmetry=False, workers=3))

    # three workers: an owner passes on to a third worker the parent links of states a
    # second one found, so the counterexample's walk back crosses all three
    @pytest.mark.parametrize("workers", [2, 3])
    @pytest.mark.parametrize("case", mutant_cases(), ids=lambda c: c[0])
    def test_mutant_first_violation_depth(self, case: tuple[str, Bounds, int | None],
                                          workers: int) -> None:
        name, bounds, cap = case
        spec = MUTANTS[name].build(3)  # its closures do not pickle: rebuilt by name
        one = explore(spec, bounds, max_states=cap)
        two = explore(spec, bounds, max_states=cap, workers=workers)
        assert one.violation is not None and two.violation is not None
        assert len(two.violation.trace) == len(one.violation.trace)
        assert (two.violation.kind, two.violation.invariant) == (one.violation.kind,
                                                                 one.violation.invariant)
        assert not two.complete
        replays(spec, bounds, two)

    def test_a_spec_that_cannot_travel(self, capsys: pytest.CaptureFixture[str]) -> None:
        base = default_spec()

        def local_guard(s: ServerState, t: Any) -> bool:  # a local function: no pickle
            return bool(base.action("learn_term").guard(s, t))

        spec = Spec(actions=replace_action(base.actions, "learn_term", guard=local_guard),
                    name="local")
        with pytest.raises(ExplorerError, match="cannot be sent to other processes"):
            explore(spec, SMALL, workers=2)
        assert explore_main(["--workers", "2", "--quiet"], spec=spec) == 2
        err = capsys.readouterr().err
        assert err.startswith("revivify explore: error: spec 'local' cannot be sent")
        assert err.count("\n") == 1

    def test_a_worker_that_dies_at_start_up(self, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
        """Workers that exit while the coordinator sends or reads (their pipes broken, or
        readable at EOF): an ExplorerError naming the worker and its exit code, and the
        CLI's one-line error (it used to be a ConnectionResetError now and then)."""
        monkeypatch.setattr(SpecSource, "of", staticmethod(
            lambda spec: _DiesAtStart(spec, None, spec.n_servers)))
        for _ in range(3):  # the race differs from one run to the next
            with pytest.raises(ExplorerError, match=r"explore worker \d died \(exit code 3\)"):
                explore(default_spec(), SMALL, workers=2)
        assert explore_main(["--max-term", "1", "--max-index", "0", "--requests", "0",
                             "--workers", "2", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("revivify explore: error: explore worker ") and \
            err.count("\n") == 1, err

    def test_cli_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        argv = ["--max-term", "1", "--max-index", "0", "--json"]
        assert explore_main([*argv, "--workers", "2"]) == 0
        two = json.loads(capsys.readouterr().out)
        assert explore_main(argv) == 0
        one = json.loads(capsys.readouterr().out)
        assert (two["engine"], two["workers"], one["workers"]) == ("local", 2, 1)
        for k in ("distinct_states", "transitions", "depth", "levels", "coverage"):
            assert two[k] == one[k], k

    def test_cli_progress_per_level(self, capsys: pytest.CaptureFixture[str]) -> None:
        assert explore_main(["--max-term", "1", "--max-index", "0", "--workers", "2"]) == 0
        captured = capsys.readouterr()
        lines = [x for x in captured.err.splitlines() if x.startswith("explore: level ")]
        assert len(lines) == 18 and "new states" in lines[0]
        assert "frontier by level" in captured.out and "2 workers" in captured.out


def run_in_threads(spec: Spec, bounds: Bounds, workers: int) -> tuple[list[_Worker], int,
                                                                       list[int]]:
    """The parallel search's workers in this process, one thread each (the GIL takes
    turns; the protocol is the same), to look inside them: the workers, the transitions
    summed over them, the coverage summed."""
    inboxes: list[Any] = [(queue.Queue(), queue.Queue()) for _ in range(workers)]
    ws = [_Worker(me, workers, SpecSource.of(spec), bounds, True, False, None, False,
                  cast(Any, None), inboxes) for me in range(workers)]
    while True:
        answers: list[Any] = [None] * workers

        def run(w: _Worker, answers: list[Any] = answers) -> None:
            answers[w.me] = w.level()

        threads = [threading.Thread(target=run, args=(w,)) for w in ws]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({a.found for a in answers}) == 1
        if not answers[0].found:
            break
    tallies = [w.search.take_tally() for w in ws]
    coverage = [sum(c) for c in zip(*[t[1] for t in tallies], strict=True)]
    return ws, sum(t[0] for t in tallies), coverage


class TestShare:
    def test_every_worker_makes_the_same_moves(self) -> None:
        """Two workers' copies, fed the same counts, move the same orbits and expand
        complementary server states."""
        orbit = [10, 11, 12, 13, 20, 22, 24, 31]  # sid -> orbit digest
        counts = {10: 900, 12: 800, 20: 700, 22: 50, 24: 40, 11: 30}  # even: worker 0
        shares = [Share(me, 2) for me in range(2)]
        for share in shares:
            share.rebalance(orbit, counts)
        assert shares[0].moved == shares[1].moved != {}
        assert all(a != b for a, b in zip(shares[0].owned, shares[1].owned, strict=True))

    def test_moves_narrow_the_gap(self) -> None:
        orbit = [*range(0, 40, 2), 1]
        counts = {o: 100 + o for o in orbit}
        share = Share(0, 2)
        share.rebalance(orbit, counts)
        load = [0, 0]
        for o, c in counts.items():
            load[share.worker(o)] += c
        assert max(load) <= sum(load) / 2 * (1 + Share.TOLERANCE)


class TestSharedWork:
    def test_each_server_state_is_expanded_by_one_worker(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The workers' caches about server states are disjoint (the point of sharing
        the work by server: each builds them for its own orbits only), and the counts
        are one process's."""
        monkeypatch.setattr(Share, "MIN_SERVERS", 10**9)  # no moves
        one = explore(default_spec(), SMALL)
        ws, transitions, coverage = run_in_threads(default_spec(), SMALL, 2)
        assert transitions == one.transitions
        assert dict(zip(one.coverage, coverage, strict=True)) == one.coverage
        planned = [{w.node.orbit[sid] for _i, sid in w.node.ex.plans} for w in ws]
        assert planned[0] and planned[1] and not planned[0] & planned[1]
        # the generated owner and translator are Node.owner and ex.key, per state
        a, b = ws
        assert len(a.seen) == len(b.seen) == one.distinct_states
        for k in b.seen:
            sids, cw = b.node.ex.unpack(k)
            mine = a.translate[1](k)
            assert mine == a.node.ex.key([a.mine_of[1][s] for s in sids], cw)
            assert mine in a.seen
            assert b.owner_of(k) == b.node.owner(k, 2) == a.owner_of(mine)

    def test_orbits_that_move_keep_the_counts(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(Share, "MIN_SERVERS", 0)
        monkeypatch.setattr(Share, "TOLERANCE", 0.0)
        one = explore(default_spec(), TINY_CRASH)
        ws, transitions, coverage = run_in_threads(default_spec(), TINY_CRASH, 3)
        assert ws[0].share.moved and all(w.share.moved == ws[0].share.moved for w in ws)
        assert transitions == one.transitions
        assert dict(zip(one.coverage, coverage, strict=True)) == one.coverage


@pytest.mark.spark
class TestSpark:
    def test_counts_like_one_process(self, spark: Any) -> None:
        from revivify.checker.explore.sparkjob import explore_spark

        r = explore_spark(default_spec(), SPARK_BOUNDS, spark)
        assert r.engine == "spark"
        same_counts(explore(default_spec(), SPARK_BOUNDS), r)

    @pytest.mark.parametrize("case", [mutant_cases()[0], mutant_cases()[2]],
                             ids=lambda c: c[0])
    def test_mutant_first_violation_depth(self, spark: Any,
                                          case: tuple[str, Bounds, int | None]) -> None:
        from revivify.checker.explore.sparkjob import explore_spark

        name, bounds, cap = case
        spec = MUTANTS[name].build(3)
        one = explore(spec, bounds, max_states=cap)
        r = explore_spark(spec, bounds, spark, max_states=cap)
        assert one.violation is not None and r.violation is not None
        assert len(r.violation.trace) == len(one.violation.trace)
        assert (r.violation.kind, r.violation.invariant) == (one.violation.kind,
                                                             one.violation.invariant)
        replays(spec, bounds, r)
