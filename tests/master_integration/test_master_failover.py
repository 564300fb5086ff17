"""The seed's known master issues, reproduced in real processes (3 masters, 3 tablet servers).

    KUDU-1353  AlterTable and GetTableLocations right after a leader-master failover: the
               locations come from the catalog's records (no replica-location cache), and
               the alter reaches every tablet (the table RUNNING at the new version)
    KUDU-1374  the leader master is killed right after deciding calls (CreateTable returned,
               its CreateTablet calls maybe not sent): the new leader does them (nudges and
               full reports), the tablets reach RUNNING
    KUDU-495   a catalog write that cannot be replicated (the leader lost its majority)
               fails the operation with a retryable error; the master keeps running; once
               the followers return the catalog is consistent and a retry succeeds
    kill -9    of the leader master in the middle of CreateTable, AlterTable and DeleteTable:
               each table wholly present (every tablet, reaching RUNNING) or wholly absent,
               an alter committed once and finished at the new version
    fencing    a tablet the catalog never heard of, on a server that heartbeats the masters,
               is kept (seed appendix A)

Every test ends with a clean stop and the trace checker over every process's trace.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import msgspec
import pytest
import trio
from integration.helpers import run, wait_for

from master_integration.test_master_processes import (
    OPTIONS,
    assert_traces_clean,
    cli,
    create_table,
    hosted,
    locations,
    ready_leader,
    table_names,
    wait_live,
    wait_running,
)
from revivify.impl.client.master import master_call, master_status
from revivify.impl.master import api
from revivify.impl.processes.masters import MasterProcesses
from revivify.impl.rpc import open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.tablet.columns import Column

T = msgspec.Struct


def tables(masters: Sequence[str]) -> dict[str, api.TableInfo]:
    reply = run(lambda: master_call(masters, api.MASTER_LIST_TABLES, api.Empty(),
                                    api.TableList, OPTIONS))
    return {t.name: t for t in reply.tables}


def wait_altered(cluster: MasterProcesses, name: str, version: int,
                 seconds: float = 30.0) -> None:
    """The table RUNNING again at ``version``: every tablet reported it."""
    def done() -> bool:
        t = tables(cluster.master_addresses).get(name)
        return t is not None and t.state == "RUNNING" and t.schema_version == version
    wait_for(done, seconds, f"table {name} RUNNING at schema version {version}")


def alter(masters: Sequence[str], name: str, column: str) -> api.TableAlteredReply:
    request = api.AlterTableRequest(name, [Column(column)])
    return run(lambda: master_call(masters, api.MASTER_ALTER_TABLE, request,
                                   api.TableAlteredReply, OPTIONS))


def assert_whole(cluster: MasterProcesses, name: str) -> bool:
    """The table is absent, or present with every tablet (one per bucket) reaching RUNNING
    on its replicas' servers. Whether it is present."""
    info = tables(cluster.master_addresses).get(name)
    if info is None:
        return False
    locs = wait_running(cluster, name)
    assert sorted(t.partition for t in locs.tablets) == list(range(info.num_tablets))
    return True


def test_kudu_1353_1374_and_an_unknown_tablet(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=3) as cluster:
        cluster.start_all()
        masters = cluster.master_addresses
        m = ",".join(masters)
        ready_leader(cluster)
        wait_live(cluster, 3)
        create_table(masters, "alt", 3, 3)
        wait_running(cluster, "alt")

        # AlterTable through the CLI: schema version 1, ALTERING until every tablet has it.
        altered = cli("table", "alter", "alt", "--add-column", "c1:int64", "--masters", m,
                      "--json")
        assert altered.returncode == 0, altered.stderr
        assert json.loads(altered.stdout)["schema_version"] == 1
        wait_altered(cluster, "alt", 1)
        bad = cli("table", "alter", "alt", "--add-column", "c1", "--masters", m)
        assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr  # c1 exists
        assert cli("table", "alter", "alt", "--add-column", "x:nope", "--masters",
                   m).returncode == 2

        # A tablet the catalog never heard of, made directly on a server that heartbeats
        # the masters (tablet create --tservers).
        ts0 = cluster.tservers.servers[0]
        made = cli("tablet", "create", "--tservers", ts0.address, "--replicas", "1",
                   "--tablet-id", "orphan", "--json")
        assert made.returncode == 0, made.stderr

        # KUDU-1353: kill -9 the leader master; right after the new leader is ready, its
        # locations are complete (replicas and leader of every tablet, from the records)
        # and an AlterTable reaches every tablet.
        old = ready_leader(cluster)
        cluster.kill_master(old)
        new = ready_leader(cluster)
        assert new != old
        locs = locations(masters, "alt")
        assert len(locs.tablets) == 3
        assert all(len(t.replicas) == 3 and sum(r.leader for r in t.replicas) == 1
                   for t in locs.tablets)
        assert alter(masters, "alt", "c2").schema_version == 2
        wait_altered(cluster, "alt", 2)
        cluster.start_master(old)

        # KUDU-1374: kill -9 the leader right after CreateTable returns (its CreateTablet
        # calls may not have left): the new leader's nudges and reports finish the job.
        leader = ready_leader(cluster)
        request = api.CreateTableRequest("k1374", [], 4, 3, request_id="req-k1374")

        async def create_then_kill() -> api.TableCreatedReply:
            reply = await master_call(masters, api.MASTER_CREATE_TABLE, request,
                                      api.TableCreatedReply, OPTIONS)
            await trio.to_thread.run_sync(cluster.kill_master, leader)
            return reply
        created = run(create_then_kill)
        locs = wait_running(cluster, "k1374", 45)
        assert {t.tablet_id for t in locs.tablets} == set(created.tablet_ids)

        # The tablet no record names is still there after many heartbeats and two leaders'
        # full reports.
        time.sleep(2.0)
        assert hosted(cluster)[ts0.uuid].get("orphan") == "RUNNING"
        cluster.stop_all()
        assert_traces_clean(cluster)


async def call_master(address: str, method: str, body: msgspec.Struct, response: type[T]
                      ) -> T:
    """One call to one master, no retry, no hint followed (the error is the answer)."""
    host, port = parse_address(address)
    status = await master_status(address)
    async with open_rpc_client(host, port, status.uuid, "test-client",
                               app_errors=api.APP_ERRORS) as client:
        return await client.call(method, body, response)


def test_kudu_495_and_kills_in_the_middle(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=3,
                       master_args=["--write-timeout-s", "2"]) as cluster:
        cluster.start_all()
        masters = cluster.master_addresses
        leader = ready_leader(cluster)
        wait_live(cluster, 3)

        # KUDU-495: the leader loses its majority (both followers stopped), CreateTable's
        # one catalog write cannot commit: the operation fails with a retryable error and
        # the master keeps running.
        followers = [i for i in range(3) if i != leader]
        for i in followers:
            cluster.kill_master(i)  # at once: the leader steps down after an election
            # timeout without a majority (check quorum), and the write should be in flight
        request = api.CreateTableRequest("k495", [], 2, 3, request_id="req-k495")
        # CatalogWriteFailed when the write was proposed and timed out or was aborted by
        # the step-down; MasterNotLeader if the leader had already stepped down (check
        # quorum: an election timeout without a majority) when the request came.
        with pytest.raises((api.CatalogWriteFailed, api.MasterNotLeader)) as failed:
            run(lambda: call_master(masters[leader], api.MASTER_CREATE_TABLE, request,
                                    api.TableCreatedReply))
        print(f"KUDU-495: {type(failed.value).__name__}: {failed.value}")
        proc = cluster.masters[leader].proc
        assert proc is not None
        assert proc.poll() is None  # still running
        run(lambda: master_status(masters[leader]))  # and answering
        for i in followers:
            cluster.start_master(i)
        ready_leader(cluster)
        # The catalog is consistent: the failed write committed later or never, whole.
        present = assert_whole(cluster, "k495")
        retry = create_table(masters, "k495", 2, 3)  # the same request id: OK either way
        assert retry.already_existed == present
        wait_running(cluster, "k495")

        # kill -9 of the leader master in the middle of CreateTable, then of DeleteTable:
        # each table wholly present or wholly absent; the client's retries complete it.
        for delay in (0.0, 0.02):
            name = f"mid-{int(delay * 1000)}"
            leader = ready_leader(cluster)
            request = api.CreateTableRequest(name, [], 3, 3, request_id=f"req-{name}")

            async def create_killing(request: api.CreateTableRequest = request,
                                     delay: float = delay, leader: int = leader
                                     ) -> api.TableCreatedReply:
                async with trio.open_nursery() as nursery:
                    async def kill() -> None:
                        await trio.sleep(delay)
                        await trio.to_thread.run_sync(cluster.kill_master, leader)
                    nursery.start_soon(kill)
                    return await master_call(masters, api.MASTER_CREATE_TABLE, request,
                                             api.TableCreatedReply, OPTIONS)
            created = run(create_killing)
            ready_leader(cluster)
            assert assert_whole(cluster, name)
            assert sorted(t.tablet_id for t in locations(masters, name).tablets) == \
                sorted(created.tablet_ids)
            cluster.start_master(leader)

            # AlterTable: the alter commits once (a retry of one that committed is refused:
            # the column exists), and the table reaches RUNNING at the new version even if
            # the killed leader never sent its AlterSchema calls (the new leader's full
            # reports show the old version: it sends them).
            leader = ready_leader(cluster)
            before = tables(masters)[name].schema_version

            async def alter_killing(name: str = name, delay: float = delay,
                                    leader: int = leader) -> None:
                async with trio.open_nursery() as nursery:
                    async def kill() -> None:
                        await trio.sleep(delay)
                        await trio.to_thread.run_sync(cluster.kill_master, leader)
                    nursery.start_soon(kill)
                    request = api.AlterTableRequest(name, [Column("c")])
                    try:
                        await master_call(masters, api.MASTER_ALTER_TABLE, request,
                                          api.TableAlteredReply, OPTIONS)
                    except Exception as exc:  # committed before the kill: c exists
                        assert "INVALID_ARGUMENT" in str(exc), exc
            run(alter_killing)
            ready_leader(cluster)
            wait_altered(cluster, name, before + 1, 45)
            cluster.start_master(leader)

            leader = ready_leader(cluster)

            async def delete_killing(name: str = name, delay: float = delay,
                                     leader: int = leader) -> None:
                async with trio.open_nursery() as nursery:
                    async def kill() -> None:
                        await trio.sleep(delay)
                        await trio.to_thread.run_sync(cluster.kill_master, leader)
                    nursery.start_soon(kill)
                    try:
                        await master_call(masters, api.MASTER_DELETE_TABLE,
                                          api.TableName(name), api.TableDeletedReply,
                                          OPTIONS)
                    except Exception as exc:  # committed before the kill: NOT_FOUND
                        assert "NOT_FOUND" in str(exc), exc
            run(delete_killing)
            ready_leader(cluster)
            assert name not in table_names(masters)

            def replicas_gone(tablet_ids: tuple[str, ...] = tuple(created.tablet_ids)
                              ) -> bool:
                return not any(t in held for held in hosted(cluster).values()
                               for t in tablet_ids)
            wait_for(replicas_gone, 30, f"{name}'s replicas deleted")
            cluster.start_master(leader)
        cluster.stop_all()
        assert_traces_clean(cluster)
