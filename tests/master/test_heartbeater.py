"""The tablet server's heartbeater (impl/tserver/heartbeat.py) against the master's
TabletServerMap (impl/master/tserver_map.py), in process, no sockets: registration with a
full report, incrementals that carry only what changed, a full report again when the master
becomes leader or asks for one."""

from __future__ import annotations

import functools
import random
from typing import Any

import attrs
import trio
import trio.testing

from revivify.impl.consensus.messages import Config, Peer
from revivify.impl.master.tserver_map import TabletServerMap
from revivify.impl.rpc import CallContext, Service, serve_rpc
from revivify.impl.storage.values import ConsensusMeta
from revivify.impl.testing import LinkFaults, MemoryNetwork
from revivify.impl.tserver.durable import Durable, Sb
from revivify.impl.tserver.heartbeat import Heartbeater, heartbeat_call_timeout
from revivify.impl.tserver.manager.core import Creating, Slot, Tombstoned
from revivify.impl.tserver.master_api import MASTER_HEARTBEAT, Heartbeat, HeartbeatResponse
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


@attrs.define
class NetHost(FakeHost):
    network: Any = None  # the heartbeater's connections come from here (a MemoryHost)


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


def test_a_heartbeat_lost_on_a_stalled_link_is_given_up_and_the_next_redials() -> None:
    """A link that loses its packets for 5 s (chunks delivered 100 000 s late; on one
    stream everything behind them waits too, as on TCP): the unanswered heartbeat is given
    up after heartbeat_call_timeout, its connection dropped, and heartbeats flow again on a
    new one within that bound of the heal. Before (no bound on the call), none ever did."""
    interval = 0.5
    bound = heartbeat_call_timeout(interval)
    assert bound == 3.0
    answered: list[float] = []

    async def body() -> None:
        net = MemoryNetwork(random.Random(0))
        tmap = TabletServerMap("m-1", dead_after=3.0)
        service = Service("fake-master")

        async def heartbeat(beat: Heartbeat, context: CallContext) -> HeartbeatResponse:
            answered.append(trio.current_time())
            return tmap.heartbeat(beat, trio.current_time()).response

        service.register(MASTER_HEARTBEAT, Heartbeat, HeartbeatResponse, heartbeat)
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(serve_rpc, service, "m-1", "m-1", 7001,
                                                  network=net.host("m-1")))
            host = NetHost(network=net.host("ts-1"))
            hb = Heartbeater(host, "m-1:7001", interval)
            nursery.start_soon(hb.run)
            await trio.sleep(2.0)
            assert len(answered) >= 3
            net.set_link_faults("ts-1", "m-1", LinkFaults(delay=100_000.0), both_ways=True)
            await trio.sleep(5.0)
            net.set_link_faults("ts-1", "m-1", LinkFaults(), both_ways=True)
            healed = trio.current_time()
            await trio.sleep(bound + 2 * interval)
            after = [t for t in answered if t >= healed]
            assert after and after[0] - healed <= bound + interval, (healed, answered[-3:])
            nursery.cancel_scope.cancel()

    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))
