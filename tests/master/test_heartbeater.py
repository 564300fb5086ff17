"""The tablet server's heartbeater (impl/tserver/heartbeat.py) against the master's
TabletServerMap (impl/master/tserver_map.py), in process, no sockets: registration with a
full report, incrementals that carry only what changed, a full report again when the master
becomes leader or asks for one."""

from __future__ import annotations

from typing import Any

import attrs

from revivify.impl.consensus.messages import Config, Peer
from revivify.impl.master.tserver_map import TabletServerMap
from revivify.impl.storage.values import ConsensusMeta
from revivify.impl.tserver.durable import Durable, Sb
from revivify.impl.tserver.heartbeat import Heartbeater
from revivify.impl.tserver.manager.core import Creating, Slot, Tombstoned
from revivify.impl.tserver.replica import config_to_storage


@attrs.define
class FakeCore:
    slots: dict[str, Slot] = attrs.field(factory=dict)


@attrs.define
class FakeTablets:
    core: FakeCore = attrs.field(factory=FakeCore)

    def replica(self, tablet_id: str) -> None:
        return None

    def durable_of(self, tablet_id: str) -> Durable | None:
        st: Any = self.core.slots[tablet_id].state
        return getattr(st, "durable", None)


@attrs.define
class FakeHost:
    uuid: str = "ts-1"
    address: str = "127.0.0.1:7051"
    tablets: Any = attrs.field(factory=FakeTablets)
    incarnation: int = 1


def tombstone(tablet_id: str, term: int) -> Slot:
    config = Config(0, (Peer("ts-1", "127.0.0.1:7051"),))
    cmeta = ConsensusMeta(tablet_id, term, None, config_to_storage(config))
    return Slot(tablet_id, Tombstoned(Durable(Sb.DELETED, tombstone_last=(1, 1), cmeta=cmeta)))


def exchange(hb: Heartbeater, tmap: TabletServerMap, now: float) -> tuple[Any, Any]:
    beat, sent = hb.build()
    verdict = tmap.heartbeat(beat, now)
    hb.absorb(beat, sent, verdict.response)
    return beat, verdict


def test_registration_full_then_incremental_then_full_on_new_leader() -> None:
    host = FakeHost()
    host.tablets.core.slots["a"] = Slot("a", Creating())
    host.tablets.core.slots["b"] = tombstone("b", 3)
    tmap = TabletServerMap("m-1", dead_after=3.0)
    tmap.set_leadership(1, True)
    hb = Heartbeater(host, "127.0.0.1:7001", 0.5)

    beat, verdict = exchange(hb, tmap, 0.0)
    assert beat.registration is not None and beat.report is not None and beat.report.full
    assert {r.tablet_id: r.state for r in beat.report.replicas} == {"a": "CREATING",
                                                                    "b": "TOMBSTONED"}
    assert verdict.report is not None  # the leader processes the registration's full report
    assert tmap.is_live("ts-1", 0.0)

    beat, verdict = exchange(hb, tmap, 0.5)  # nothing changed: an empty incremental
    assert beat.registration is None and beat.report is not None
    assert not beat.report.full and beat.report.replicas == []

    host.tablets.core.slots["b"] = tombstone("b", 4)  # its term moved: reported again
    beat, _ = exchange(hb, tmap, 1.0)
    assert beat.report is not None and not beat.report.full
    assert [r.tablet_id for r in beat.report.replicas] == ["b"]

    # Another term's leadership: the server sees it and sends a full report (KUDU-1374).
    tmap.set_leadership(2, True)
    exchange(hb, tmap, 1.5)
    beat, verdict = exchange(hb, tmap, 2.0)
    assert beat.report is not None and beat.report.full and len(beat.report.replicas) == 2
    assert verdict.report is not None


def test_a_master_that_forgot_the_server_gets_a_registration() -> None:
    host = FakeHost()
    hb = Heartbeater(host, "127.0.0.1:7001", 0.5)
    exchange(hb, TabletServerMap("m-1", dead_after=3.0), 0.0)
    fresh = TabletServerMap("m-1", dead_after=3.0)  # a restarted master
    beat, verdict = exchange(hb, fresh, 1.0)
    assert beat.registration is None and verdict.response.needs_register
    beat, _ = exchange(hb, fresh, 1.5)
    assert beat.registration is not None and beat.report is not None and beat.report.full
    assert fresh.is_live("ts-1", 1.5)
