"""Two masters briefly both believing they lead cannot make two changes to one tablet (seed
001 appendix A: "ChangeConfig is safe due to the use of CAS on the last change config
opid"; issue 19). In one process (MemoryNetwork, MockClock): the old leader master is cut
off from the other masters but not from the tablet servers, a new leader is elected, and
each decides an AddReplica for the same tablet on the same committed config index. The
tablet's Raft leader applies one; the other is refused by the CAS."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from test_master_sim import create, live_servers, running, until

from revivify.checker.local import check_paths
from revivify.impl.master import api
from revivify.impl.testing.mastercluster import SimMasterCluster, open_master_cluster


def _events(trace_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(trace_dir.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


async def scenario(c: SimMasterCluster) -> dict[str, Any]:
    old = await c.ready_leader()
    await until(lambda: _all_live(c, old, 5), "5 live tablet servers")
    made = await create(c, old, "cas", 1, 3)
    await until(lambda: running(c, "cas"), "cas RUNNING")
    [tablet_id] = made.tablet_ids
    locs = await c.call_master(old, api.MASTER_TABLE_LOCATIONS, api.TableName("cas"),
                               api.TableLocationsReply)
    [tablet] = locs.tablets
    cas = tablet.config_index
    members = {r.uuid for r in tablet.replicas}
    leader_uuid = next(r.uuid for r in tablet.replicas if r.leader)
    by_uuid = {s.uuid: s for s in c.tservers.servers}
    spare_a, spare_b = sorted(set(by_uuid) - members)

    # The old leader's check-quorum has not fired yet (a slow or paused process: it would
    # step down one election timeout after losing its majority); cut it off from the other
    # masters, not from the tablet servers, and let the others elect a new leader.
    old_master = c.masters[old].master
    assert old_master is not None
    replica = old_master.catalog_replica()
    assert replica is not None
    replica.core.options = attrs.evolve(replica.core.options, check_quorum=False)
    others = [m.index for m in c.masters if m.index != old]
    c.net.partition([c.masters[old].host], [c.masters[i].host for i in others])
    new = await c.ready_leader(among=others)
    for i in (old, new):  # both believe they lead, and are ready
        status = await c.call_master(i, api.MASTER_STATUS, api.Empty(), api.MasterStatus)
        assert status.role == "LEADER" and status.ready, (i, status)

    # The new leader decides first, but its ChangeConfig is held up on the way to the
    # tablet's leader (retried); the old leader's, decided on the same config, arrives.
    c.net.partition([c.masters[new].host], [by_uuid[leader_uuid].host])
    added_b = await c.call_master(new, api.MASTER_ADD_REPLICA,
                                  api.ReplicaChangeRequest(tablet_id, spare_b, "VOTER"),
                                  api.ReplicaChangeReply)
    added_a = await c.call_master(old, api.MASTER_ADD_REPLICA,
                                  api.ReplicaChangeRequest(tablet_id, spare_a, "VOTER"),
                                  api.ReplicaChangeReply)
    assert added_a.cas_config_index == added_b.cas_config_index == cas
    assert added_a.leader == added_b.leader == leader_uuid
    tablet_leader = by_uuid[leader_uuid].index

    async def changed() -> bool:
        info = await c.tservers.state(tablet_leader, tablet_id)
        return info.config_index > cas

    await until(changed, "the old leader's change committed")
    c.net.heal()  # the new leader's ChangeConfig now reaches the tablet's leader
    await trio.sleep(10.0)  # its retries (backoff up to 2 s) have all been answered
    info = await c.tservers.state(tablet_leader, tablet_id)
    return {"tablet_id": tablet_id, "cas": cas, "members": members, "a": spare_a,
            "b": spare_b, "info": info, "old": old_master.uuid,
            "new": c.masters[new].master.uuid}  # type: ignore[union-attr]


async def _all_live(c: SimMasterCluster, i: int, n: int) -> bool:
    return await live_servers(c, i) >= n


def test_two_masters_both_leading_make_one_change(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="revivify.impl.master.server")
    found: dict[str, Any] = {}

    async def main() -> None:
        # No healing policy: the only changes are the two the test asks for.
        async with open_master_cluster(str(tmp_path), 3, 5, seed=3,
                                       master_options={"heal": False}) as c:
            await c.start_all()
            found.update(await scenario(c))
            await c.stop_all()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    tablet_id, cas = found["tablet_id"], found["cas"]
    info = found["info"]
    # One change applied: the old leader's (A added); B, decided by the new leader on the
    # same committed config, never became a member.
    peers = {p.uuid for p in info.peers}
    assert peers == found["members"] | {found["a"]}, (peers, found)
    events = _events(tmp_path)
    accepted = [e for e in events
                if e["event"] == "config_change" and e["tablet"] == tablet_id]
    assert [e["args"]["cas_index"] for e in accepted] == [cas], accepted
    # Both masters released a ChangeConfig for the tablet (each traced as master_call).
    calls = [e for e in events if e["event"] == "master_call"
             and e["args"]["method"] == "change_config" and e["args"]["tablet"] == tablet_id]
    assert {e["node"] for e in calls} == {found["old"], found["new"]}, calls
    # ...and the later one was refused by the CAS on the committed config index.
    refusals = [r.getMessage() for r in caplog.records if "CAS_MISMATCH" in r.getMessage()]
    assert any((tablet_id in m and found["b"] not in m) or tablet_id in m for m in refusals), \
        [r.getMessage() for r in caplog.records if tablet_id in r.getMessage()]
    report = check_paths([str(tmp_path)])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert report.events > 0 and not bad, report.text()
