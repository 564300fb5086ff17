"""The client library when a server stalls: call timeout, leader discovery, write outcomes.

Fake tablet servers (fake_tserver.py) and fake masters (below) on a MemoryNetwork under
MockClock. A *stalled* host is one whose every link delays each chunk far beyond any test
(memnet.LinkFaults): connections to it open, nothing comes back, like a SIGSTOPped process.
Assertions are about what happened (who was asked, what was applied, what the error says),
never about how long it took, beyond "before the deadline".
"""

from __future__ import annotations

import functools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import msgspec
import pytest
import trio
import trio.testing
from fake_tserver import FakeCluster, FakeServer, FakeTablet, memory_cluster

from revivify.impl.client import (
    ClientOptions,
    DeadlineExceeded,
    MastersUnreachable,
    NoAnswer,
    Rejected,
    RetriesExhausted,
    ServerUnreachable,
    TabletNotFoundError,
    open_master_client,
    open_tablet_client,
    outcome_of,
    tablet_status,
)
from revivify.impl.client.master import master_call, master_status
from revivify.impl.master import api as master_api
from revivify.impl.rpc import Backoff, CallContext, Service, serve_rpc
from revivify.impl.testing import LinkFaults, MemoryNetwork
from revivify.impl.tserver import api

CLIENT = "client"
TABLET = "tablet-s"
STALLED = LinkFaults(delay=100_000.0)
OPTIONS = ClientOptions(max_attempts=50, deadline=10.0, call_timeout=1.0,
                        backoff=Backoff(initial=0.05, max=0.4))


def run_mock(test: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        with trio.fail_after(3600):
            await test()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def network(seed: int = 0) -> MemoryNetwork:
    return MemoryNetwork(random.Random(seed))


def stall(net: MemoryNetwork, host: str, others: list[str]) -> None:
    for other in others:
        net.set_link_faults(host, other, STALLED, both_ways=True)


def writes(cluster: FakeCluster) -> list[tuple[str, str, int]]:
    return [(uuid, r.client_id, r.seq) for uuid, r in cluster.calls(api.DATA_WRITE)]


# ---------------------------------------------------------------------------- discovery


def test_a_stalled_first_server_does_not_block_discovery() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET, leader=1)
            stall(net, "ts-1", [CLIENT])
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=OPTIONS) as tablet:
                started = trio.current_time()
                await tablet.put(b"k", b"v")
                assert await tablet.get(b"k") == b"v"
                assert trio.current_time() - started < OPTIONS.deadline
                assert tablet.leader_address == "ts-2:7050"
                assert tablet.discoveries == 1

    run_mock(body)


def test_the_leader_is_remembered_between_calls() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET, leader=2)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=OPTIONS) as tablet:
                for n in range(5):
                    await tablet.put(b"k%d" % n, b"v")
                    assert await tablet.get(b"k%d" % n) == b"v"
                assert tablet.discoveries == 1
            asked = cluster.calls(api.ADMIN_CONSENSUS_STATE)
            assert len(asked) == 3  # one round of three questions, then only the leader
            assert {uuid for uuid, method, _ in cluster.log
                    if method != api.ADMIN_CONSENSUS_STATE} == {"uuid-3"}

    run_mock(body)


def test_a_stalled_cached_leader_times_out_and_the_new_one_is_found() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET, leader=0)
            async with open_tablet_client(cluster.addresses, TABLET, client_id="c1",
                                          network=net.host(CLIENT), options=OPTIONS
                                          ) as tablet:
                await tablet.put(b"a", b"1")
                stall(net, "ts-1", [CLIENT])
                state.leader = "uuid-2"  # (the others elected a new leader)
                state.term += 1
                await tablet.put(b"b", b"2")
                assert tablet.leader_address == "ts-2:7050"
                assert tablet.discoveries == 2
            assert state.rows == {b"a": b"1", b"b": b"2"}

    run_mock(body)


def test_a_deposed_leader_answering_is_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A LEADER answer in a term below one already seen is a deposed leader: skipped."""
    real_info = FakeServer.info

    def info(self: FakeServer, tablet: FakeTablet) -> api.ReplicaInfo:
        said = real_info(self, tablet)
        if self.uuid != "uuid-1":
            return said
        return msgspec.structs.replace(said, role="LEADER", term=tablet.term - 1,
                                       leader="uuid-1")

    monkeypatch.setattr(FakeServer, "info", info)

    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET, leader=1)
            state.term = 2
            # A follower (term 2) answers first, then the deposed leader (LEADER in term
            # 1), then the real leader: the deposed one must not be taken.
            net.set_link_faults("ts-1", CLIENT, LinkFaults(delay=0.05))
            net.set_link_faults("ts-2", CLIENT, LinkFaults(delay=0.1))
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=OPTIONS) as tablet:
                await tablet.put(b"k", b"v")
                assert tablet.leader_address == "ts-2:7050"
                assert tablet.discoveries == 1
            assert writes(cluster)[0][0] == "uuid-2"

    run_mock(body)


def test_tablet_not_hosted_anywhere_is_final_but_not_with_a_silent_server() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster, open_tablet_client(
                cluster.addresses, "nope", network=net.host(CLIENT), options=OPTIONS
        ) as tablet:
            with pytest.raises(TabletNotFoundError):
                await tablet.get(b"k")
            stall(net, "ts-3", [CLIENT])
            with pytest.raises(DeadlineExceeded):  # ts-3 might host it: not a definite no
                await tablet.get(b"k")

    run_mock(body)


# ---------------------------------------------------------------------------- outcomes


def test_a_write_cut_off_after_it_was_sent_is_unknown() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET)
            # The first write is applied, then its answer (and all later) never arrive.
            cluster.server("uuid-1").after_next[api.DATA_WRITE] = [
                lambda: stall(net, "ts-1", [CLIENT])]
            async with open_tablet_client(cluster.addresses, TABLET, client_id="c1",
                                          network=net.host(CLIENT), options=OPTIONS
                                          ) as tablet:
                with pytest.raises(DeadlineExceeded) as caught:
                    await tablet.put(b"k", b"v")
            error = caught.value
            assert error.outcome_unknown and outcome_of(error) == "unknown"
            assert "may or may not have been applied" in error.message
            assert isinstance(error.last_error, NoAnswer | type(None)) or error.attempts > 1
            assert state.rows == {b"k": b"v"}  # it was, in fact, applied

    run_mock(body)


def test_a_write_that_never_left_is_failed() -> None:
    """Every server stalled before the client ever connected: each attempt times out in
    the connect or the handshake, so nothing was sent: a definite failure."""
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            for host in ("ts-1", "ts-2", "ts-3"):
                stall(net, host, [CLIENT])
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=OPTIONS) as tablet:
                with pytest.raises(DeadlineExceeded) as caught:
                    await tablet.put(b"k", b"v")
            assert not caught.value.outcome_unknown
            assert outcome_of(caught.value) == "failed"
            assert "may or may not" not in caught.value.message
            assert writes(cluster) == []

    run_mock(body)


def test_a_stalled_leader_that_got_the_write_makes_it_unknown_even_if_others_refuse(
        ) -> None:
    """The write reached the stalled leader (maybe applied); later attempts are refused
    by followers and no leader is found: the outcome stays unknown, never "failed"."""
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            state = cluster.add_tablet(TABLET)
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=OPTIONS) as tablet:
                await tablet.put(b"warm", b"up")  # connected to the leader
                stall(net, "ts-1", [CLIENT])
                state.leader = None  # no new leader within the deadline
                with pytest.raises(DeadlineExceeded) as caught:
                    await tablet.put(b"k", b"v")
            assert outcome_of(caught.value) == "unknown"

    run_mock(body)


def test_definite_refusals_are_failed() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net) as cluster:
            cluster.add_tablet(TABLET)
            leader = cluster.server("uuid-1")
            leader.fail_next[api.DATA_WRITE] = [api.InvalidArgument("bad")]
            async with open_tablet_client(cluster.addresses, TABLET, network=net.host(CLIENT),
                                          options=attrs.evolve(OPTIONS, max_attempts=3)
                                          ) as tablet:
                with pytest.raises(Rejected) as refused:
                    await tablet.put(b"k", b"v")
                assert outcome_of(refused.value) == "failed"
                leader.fail_next[api.DATA_WRITE] = [
                    api.TabletNotRunning(TABLET, "BOOTSTRAPPING", "")] * 3
                with pytest.raises(RetriesExhausted) as exhausted:
                    await tablet.put(b"k", b"v")
                assert outcome_of(exhausted.value) == "failed"
                leader.fail_next[api.DATA_WRITE] = [
                    ("apply", api.OperationAborted("lost"))] * 3
                with pytest.raises(RetriesExhausted) as aborted:
                    await tablet.put(b"k", b"v")
                assert outcome_of(aborted.value) == "unknown"

    run_mock(body)


# ---------------------------------------------------------------------------- status


def test_tablet_status_marks_the_silent_server_and_shows_the_others() -> None:
    async def body() -> None:
        net = network()
        async with memory_cluster(net, n=4) as cluster:
            cluster.add_tablet(TABLET, hosts=cluster.servers[:3])
            stall(net, "ts-1", [CLIENT])
            net.kill("ts-4")
            status = await tablet_status(cluster.addresses, TABLET, network=net.host(CLIENT),
                                         options=OPTIONS)
            rows = {r.address: r for r in status.replicas}
            assert [r.address for r in status.replicas] == cluster.addresses
            assert rows["ts-1:7050"].answer == "no answer"
            assert not rows["ts-1:7050"].reachable and rows["ts-1:7050"].info is None
            assert rows["ts-4:7050"].answer == "unreachable"
            assert [rows[f"ts-{i}:7050"].answer for i in (2, 3)] == ["ok", "ok"]
            assert status.hosted and status.leader is None  # the leader is the silent one
            assert [r.address for r in status.silent] == ["ts-1:7050", "ts-4:7050"]

    run_mock(body)


# ---------------------------------------------------------------------------- masters


@attrs.define(eq=False)
class FakeMasters:
    """Three fake masters m-1..m-3 answering Status and ListTables; one leads."""

    leader: int = 1  # index into the masters
    term: int = 1
    ready: bool = True
    refuse: Exception | None = None  # the leader's answer to ListTables, if set
    log: list[tuple[str, str]] = attrs.field(factory=list)

    def address(self, i: int) -> str:
        return f"m-{i + 1}:7001"

    def service(self, i: int) -> Service:
        service = Service("fake-master")

        async def status(request: master_api.Empty, context: CallContext
                         ) -> master_api.MasterStatus:
            self.log.append((f"muuid-{i + 1}", master_api.MASTER_STATUS))
            leads = self.leader == i
            return master_api.MasterStatus(
                f"muuid-{i + 1}", self.address(i), "LEADER" if leads else "FOLLOWER",
                self.term, f"muuid-{self.leader + 1}", self.address(self.leader),
                leads and self.ready, [self.address(j) for j in range(3)])

        async def list_tables(request: master_api.Empty, context: CallContext
                              ) -> master_api.TableList:
            self.log.append((f"muuid-{i + 1}", master_api.MASTER_LIST_TABLES))
            if self.leader != i:
                raise master_api.MasterNotLeader(f"muuid-{self.leader + 1}",
                                                 self.address(self.leader), self.term)
            if self.refuse is not None:
                raise self.refuse
            return master_api.TableList([])

        service.register(master_api.MASTER_STATUS, master_api.Empty,
                         master_api.MasterStatus, status)
        service.register(master_api.MASTER_LIST_TABLES, master_api.Empty,
                         master_api.TableList, list_tables)
        return service


@asynccontextmanager
async def fake_masters(net: MemoryNetwork) -> AsyncIterator[FakeMasters]:
    masters = FakeMasters()
    async with trio.open_nursery() as nursery:
        for i in range(3):
            await nursery.start(functools.partial(
                serve_rpc, masters.service(i), f"muuid-{i + 1}", f"m-{i + 1}", 7001,
                network=net.host(f"m-{i + 1}")))
        yield masters
        nursery.cancel_scope.cancel()


MASTERS = ["m-1:7001", "m-2:7001", "m-3:7001"]


def test_master_leader_found_past_a_stalled_first_master_and_remembered() -> None:
    async def body() -> None:
        net = network()
        async with fake_masters(net) as masters:
            masters.leader = 1
            stall(net, "m-1", [CLIENT])
            async with open_master_client(MASTERS, network=net.host(CLIENT),
                                          options=OPTIONS) as client:
                for _ in range(3):
                    reply = await client.call(master_api.MASTER_LIST_TABLES,
                                              master_api.Empty(), master_api.TableList)
                    assert reply.tables == []
                assert client.leader_address == "m-2:7001"
                assert client.discoveries == 1
                lists = [u for u, m in masters.log if m == master_api.MASTER_LIST_TABLES]
                assert lists == ["muuid-2"] * 3

                # The leader moves: the old one's NOT_THE_LEADER hint is followed at once.
                masters.leader = 2
                masters.term += 1
                await client.call(master_api.MASTER_LIST_TABLES, master_api.Empty(),
                                  master_api.TableList)
                assert client.leader_address == "m-3:7001"
                assert client.discoveries == 1

                # The leader stalls: one call timeout, a new round, the new leader.
                stall(net, "m-3", [CLIENT])
                masters.leader = 1
                masters.term += 1
                await client.call(master_api.MASTER_LIST_TABLES, master_api.Empty(),
                                  master_api.TableList)
                assert client.leader_address == "m-2:7001"
                assert client.discoveries == 2
            # The one-shot form and master_status (bounded: a stalled master is NoAnswer).
            reply = await master_call(MASTERS, master_api.MASTER_LIST_TABLES,
                                      master_api.Empty(), master_api.TableList, OPTIONS,
                                      network=net.host(CLIENT))
            assert reply.tables == []
            with pytest.raises(ServerUnreachable, match="no answer"):
                await master_status("m-1:7001", OPTIONS, network=net.host(CLIENT))
            status = await master_status("m-2:7001", OPTIONS, network=net.host(CLIENT))
            assert status.role == "LEADER"

    run_mock(body)


def test_master_call_without_a_ready_leader_gives_up_at_the_deadline() -> None:
    async def body() -> None:
        net = network()
        async with fake_masters(net) as masters:
            for host in ("m-1", "m-2", "m-3"):
                stall(net, host, [CLIENT])
            with pytest.raises(DeadlineExceeded) as caught:
                await master_call(MASTERS, master_api.MASTER_LIST_TABLES, master_api.Empty(),
                                  master_api.TableList, OPTIONS, network=net.host(CLIENT))
            # Said in an operator's words (issue 31): each master, and what happened there.
            assert isinstance(caught.value, MastersUnreachable)
            assert caught.value.message == ("no master answered at m-1:7001, m-2:7001, "
                                            "m-3:7001 (timed out after 1s)")
            assert caught.value.operation == master_api.MASTER_LIST_TABLES
            assert not caught.value.outcome_unknown  # a read: nothing to be unsure about
            assert masters.log == []

    run_mock(body)


def test_a_leader_refusing_until_the_deadline_is_a_definite_no() -> None:
    """A retryable refusal (NOT_ENOUGH_SERVERS: servers may still join) is asked again until
    the deadline; if the leader still refuses then, the answer is its refusal (Rejected: the
    CLI's exit 1), not an unreachable cluster (DeadlineExceeded: exit 2)."""
    async def body() -> None:
        net = network()
        async with fake_masters(net) as masters:
            masters.refuse = master_api.Refused("NOT_ENOUGH_SERVERS",
                                                "3 live tablet servers needed, 2 known", 1)
            with pytest.raises(Rejected) as caught:
                await master_call(MASTERS, master_api.MASTER_LIST_TABLES, master_api.Empty(),
                                  master_api.TableList, OPTIONS, network=net.host(CLIENT))
            assert caught.value.address == "m-2:7001"
            assert "NOT_ENOUGH_SERVERS" in str(caught.value)
            asked = [u for u, m in masters.log if m == master_api.MASTER_LIST_TABLES]
            assert len(asked) > 1  # retried before giving the refusal as the answer

    run_mock(body)


def test_a_catalog_write_that_did_not_commit_in_time_is_an_unknown_outcome() -> None:
    """CatalogWriteFailed: the leader's write did not commit in time, but its log entry may
    still commit under the next leader, so giving up after it is "may or may not have been
    applied" (the CLI's outcome unknown), never a plain failure."""
    async def body() -> None:
        net = network()
        async with fake_masters(net) as masters:
            masters.refuse = master_api.CatalogWriteFailed("create_table: deposed")
            with pytest.raises(DeadlineExceeded) as caught:
                await master_call(MASTERS, master_api.MASTER_LIST_TABLES, master_api.Empty(),
                                  master_api.TableList, OPTIONS, network=net.host(CLIENT))
            assert caught.value.outcome_unknown
            assert "may or may not have been applied" in caught.value.message

    run_mock(body)
