"""Replica placement: which live tablet servers host the replicas of new tablets.

Policy (Kudu's placement spreads load; this is its simplest deterministic form): each tablet
gets ``num_replicas`` distinct servers, the ones holding the fewest replicas, counting the
replicas already placed by this same request. Ties are broken by the injected
``random.Random`` (the candidates are put in uuid order, shuffled, then stably sorted by
load), so the same seed and the same inputs give the same placement, whatever order the
caller listed the servers in.

Invariants (tests/master/test_placement.py checks them with Hypothesis):
P1  each tablet's replicas are distinct live servers, exactly ``num_replicas`` of them;
P2  starting from any loads, each choice takes servers of minimal load at that moment, so
    from equal loads the resulting loads differ by at most one (the spread KUDU-1358 lost
    when a new leader knew only some of the servers);
P3  fewer candidates than ``num_replicas`` is a `NotEnoughServers` refusal, never a
    placement with fewer or repeated replicas.

Which servers are candidates is the caller's decision: the live ones of the tablet-server
map (tserver_map.py), which every master keeps warm from heartbeats, leader or not.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

import attrs

from revivify.impl.consensus.messages import Peer

from .errors import NotEnoughServers


@attrs.frozen
class Candidate:
    """A live tablet server that may host a replica."""

    uuid: str
    address: str


def _ordered(candidates: Iterable[Candidate], exclude: Iterable[str]) -> list[Candidate]:
    excluded = set(exclude)
    unique = {c.uuid: c for c in candidates if c.uuid not in excluded}
    return [unique[uuid] for uuid in sorted(unique)]


def choose(candidates: Sequence[Candidate], load: Mapping[str, int], count: int,
           rng: random.Random, exclude: Iterable[str] = ()) -> list[Candidate] | NotEnoughServers:
    """``count`` distinct candidates (none in ``exclude``) of least load, ties by ``rng``."""
    assert count >= 1
    pool = _ordered(candidates, exclude)
    if len(pool) < count:
        return NotEnoughServers(needed=count, live=len(pool))
    rng.shuffle(pool)
    pool.sort(key=lambda c: load.get(c.uuid, 0))  # stable: equal loads keep the shuffle
    return pool[:count]


def place_tablets(candidates: Sequence[Candidate], load: Mapping[str, int], num_tablets: int,
                  num_replicas: int,
                  rng: random.Random) -> list[tuple[Peer, ...]] | NotEnoughServers:
    """The peers of ``num_tablets`` new tablets, all VOTERs (P1, P2, P3).

    ``load`` is each server's replica count now (``Catalog.replica_counts``); the replicas
    placed here count as they are placed, so a table's tablets spread over the servers.
    """
    assert num_tablets >= 0 and num_replicas >= 1
    available = len(_ordered(candidates, ()))
    if available < num_replicas:  # P3, even for no tablet at all
        return NotEnoughServers(needed=num_replicas, live=available)
    running = dict(load)
    placed: list[tuple[Peer, ...]] = []
    for _ in range(num_tablets):
        chosen = choose(candidates, running, num_replicas, rng)
        if isinstance(chosen, NotEnoughServers):
            return chosen
        for c in chosen:
            running[c.uuid] = running.get(c.uuid, 0) + 1
        # Peers in uuid order: the config does not depend on the tie-break's order.
        placed.append(tuple(Peer(c.uuid, c.address) for c in sorted(chosen, key=lambda c: c.uuid)))
    assert all(len({p.uuid for p in peers}) == num_replicas for peers in placed)
    return placed


__all__ = ["Candidate", "choose", "place_tablets"]
