"""A master's metrics and log lines, in process (masters and tablet servers on the test
doubles, MockClock): a tablet server's machine crashes, the ready leader's tablets-by-health
gauge shows the tablet under-replicated, and back to healthy once healing moved the replica;
the servers' gauges, the moves and the calls count it; the log says each step once."""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.testing
from observe_helpers import Samples, captured_logs, parse, value

from revivify.impl.master import api
from revivify.impl.master.catalog import Catalog
from revivify.impl.master.errors import MasterError
from revivify.impl.master.monitor import tablet_health
from revivify.impl.master.operations import CreateTable, plan_create_table
from revivify.impl.master.placement import Candidate
from revivify.impl.master.replication import server_view
from revivify.impl.tablet.columns import Column
from revivify.impl.testing.mastercluster import SimMasterCluster, open_master_cluster


def master_metrics(c: SimMasterCluster, i: int) -> Samples:
    master = c.masters[i].master
    assert master is not None
    return parse(master.metrics.exposition())


async def until(c: SimMasterCluster, leader: int, check: object, what: str,
                limit: float = 120) -> Samples:
    """Poll the leader's metrics (simulated seconds) until ``check(samples)``."""
    with trio.fail_after(limit):
        while True:
            m = master_metrics(c, leader)
            if check(m):  # type: ignore[operator]
                return m
            await trio.sleep(0.05)
    raise AssertionError(what)


def test_a_crashed_tablet_server_makes_a_tablet_under_replicated_until_healed(
        tmp_path: Path) -> None:
    seen: dict[str, float] = {}

    async def scenario(c: SimMasterCluster) -> None:
        leader = await c.ready_leader()
        request = api.CreateTableRequest("t", [], 1, 3, request_id="req-t")
        made = await c.call_master(leader, api.MASTER_CREATE_TABLE, request,
                                   api.TableCreatedReply)
        m = await until(c, leader, lambda m: value(
            m, "revivify_master_tablets", health="healthy") == 1 and value(
            m, "revivify_master_calls_total", method="Admin.CreateTablet",
            result="done") == 3, "healthy, created")
        assert value(m, "revivify_master_ready") == 1
        assert value(m, "revivify_master_tservers", state="live") == 4
        assert value(m, "revivify_master_catalog_writes_total", result="ok") >= 1
        assert value(m, "revivify_master_catalog_write_seconds_count") >= 1
        assert value(m, "revivify_master_calls_total", method="Admin.CreateTablet",
                     result="done") == 3
        # The embedded tablet server's families are in the same registry.
        assert value(m, "revivify_raft_replicas", role="LEADER") == 1
        locs = await c.call_master(leader, api.MASTER_TABLE_LOCATIONS, api.TableName("t"),
                                   api.TableLocationsReply)
        (tablet,) = locs.tablets
        assert tablet.tablet_id == made.tablet_ids[0]
        victim = next(r.uuid for r in tablet.replicas if not r.leader)
        index = next(i for i, u in c.tservers.uuids.items() if u == victim)
        await c.tservers.crash(index)
        m = await until(c, leader, lambda m: value(m, "revivify_master_tablets",
                                                   health="under_replicated") == 1,
                        "under-replicated")
        seen["under"] = value(m, "revivify_master_tablets", health="under_replicated")
        m = await until(c, leader, lambda m: value(
            m, "revivify_master_tablets", health="healthy") == 1 and value(
            m, "revivify_master_tablets_moving") == 0 and value(
            m, "revivify_master_moves_finished_total") >= 1, "healed")
        assert value(m, "revivify_master_tablets", health="under_replicated") == 0
        assert value(m, "revivify_master_tablets", health="unavailable") == 0
        assert value(m, "revivify_master_tservers", state="dead") == 1
        assert value(m, "revivify_master_moves_started_total") >= 1
        assert value(m, "revivify_master_heal_changes_total") >= 1
        assert value(m, "revivify_master_calls_total", method="Admin.ChangeConfig",
                     result="done") >= 1
        # Each live tablet server heartbeats every master, and the masters answer.
        for ts in c.tservers.servers:
            if ts.server is not None:
                t = parse(ts.server.metrics.exposition())
                assert value(t, "revivify_heartbeats_sent_total") >= 3
                assert value(t, "revivify_heartbeats_answered_total") >= 3
        # A follower master exports no health (its snapshot is not the leader's).
        follower = next(i for i in c.running() if i != leader)
        f = master_metrics(c, follower)
        assert value(f, "revivify_master_ready") == 0
        assert ("revivify_master_tablets", (("health", "healthy"),)) not in f

    with captured_logs() as lines:
        async def main() -> None:
            async with open_master_cluster(str(tmp_path / "traces"), 3, 4, seed=5) as c:
                await c.start_all()
                await scenario(c)
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen["under"] == 1
    text = "\n".join(lines.messages())
    assert "table t created" in text
    assert "ready leader in term" in text and "catalog rebuilt in" in text
    assert "is dead: no heartbeat for" in text
    assert "replica move off" in text and "started" in text and "finished" in text


def test_tablet_health_counts_healthy_voters_against_the_replication_factor() -> None:
    servers = [Candidate(f"ts-{i}", f"127.0.0.1:{7050 + i}") for i in range(3)]
    plan = plan_create_table(Catalog(), CreateTable("t", (Column("key", key=True),), 1, 3,
                                                    "req"),
                             servers=servers, reserved=(), rng=random.Random(0))
    assert not isinstance(plan, MasterError)
    catalog = Catalog().apply(plan.write)
    (tablet,) = catalog.tablets.values()
    voters = [p.uuid for p in tablet.consensus.config.peers]
    everyone = server_view(voters, (), (), ())
    assert tablet_health(tablet, 3, everyone) == "healthy"
    one_dead = server_view(voters[:2], voters[2:], (), ())
    assert tablet_health(tablet, 3, one_dead) == "under_replicated"
    two_dead = server_view(voters[:1], voters[1:], (), ())
    assert tablet_health(tablet, 3, two_dead) == "unavailable"
    failed_there = server_view(voters, (), (), [(tablet.tablet_id, voters[0])])
    assert tablet_health(tablet, 3, failed_there) == "under_replicated"

