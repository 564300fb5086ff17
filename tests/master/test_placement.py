"""Placement: distinct live servers, least loaded first, deterministic by seed (P1-P3)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from revivify.impl.master.errors import NotEnoughServers
from revivify.impl.master.placement import Candidate, choose, place_tablets


def candidates(n: int) -> list[Candidate]:
    return [Candidate(f"ts-{i:02d}", f"h{i}:1") for i in range(n)]


@given(n_servers=st.integers(1, 12), num_tablets=st.integers(0, 30),
       num_replicas=st.sampled_from([1, 3, 5]), seed=st.integers(0, 2**32))
def test_placement_spreads_evenly_from_equal_loads(n_servers: int, num_tablets: int,
                                                   num_replicas: int, seed: int) -> None:
    placed = place_tablets(candidates(n_servers), {}, num_tablets, num_replicas,
                           random.Random(seed))
    if n_servers < num_replicas:  # P3
        assert placed == NotEnoughServers(needed=num_replicas, live=n_servers)
        return
    assert not isinstance(placed, NotEnoughServers)
    assert len(placed) == num_tablets
    counts = dict.fromkeys((c.uuid for c in candidates(n_servers)), 0)
    for peers in placed:  # P1
        uuids = [p.uuid for p in peers]
        assert len(set(uuids)) == num_replicas and set(uuids) <= set(counts)
        for u in uuids:
            counts[u] += 1
    assert max(counts.values()) - min(counts.values()) <= 1  # P2


@given(loads=st.lists(st.integers(0, 20), min_size=3, max_size=10), seed=st.integers(0, 99))
def test_each_choice_takes_the_least_loaded(loads: list[int], seed: int) -> None:
    cands = candidates(len(loads))
    load = {c.uuid: n for c, n in zip(cands, loads, strict=True)}
    chosen = choose(cands, load, 3, random.Random(seed))
    assert not isinstance(chosen, NotEnoughServers)
    picked = sorted(load[c.uuid] for c in chosen)
    assert picked == sorted(loads)[:3]


@given(seed=st.integers(0, 2**32), order=st.randoms(use_true_random=False))
def test_same_seed_same_placement_whatever_the_input_order(seed: int,
                                                          order: random.Random) -> None:
    cands = candidates(7)
    shuffled = list(cands)
    order.shuffle(shuffled)
    first = place_tablets(cands, {"ts-03": 2}, 5, 3, random.Random(seed))
    second = place_tablets(shuffled, {"ts-03": 2}, 5, 3, random.Random(seed))
    assert first == second


def test_excluded_and_duplicate_candidates() -> None:
    cands = [*candidates(3), Candidate("ts-00", "again:1")]
    assert choose(cands, {}, 3, random.Random(0), exclude=["ts-01"]) == NotEnoughServers(3, 2)
    chosen = choose(cands, {}, 3, random.Random(0))
    assert not isinstance(chosen, NotEnoughServers)
    assert sorted(c.uuid for c in chosen) == ["ts-00", "ts-01", "ts-02"]
