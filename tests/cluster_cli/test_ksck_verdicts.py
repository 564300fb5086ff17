"""ksck's verdicts from facts, without processes (impl/cli/ksck.py `check`): one cluster of 3
masters and 3 tablet servers with one table of one tablet, healthy, then each kind of
problem put in by hand and named."""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

from revivify.impl.cli.ksck import Answer, Facts, check
from revivify.impl.consensus.messages import Peer
from revivify.impl.master import api
from revivify.impl.tserver.api import ReplicaInfo, ServerStatus

MASTERS = ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
TSERVERS = {"a": "127.0.0.1:7051", "b": "127.0.0.1:7052", "c": "127.0.0.1:7053"}
TABLET = "t0"
PEERS = [Peer(u, a, "VOTER") for u, a in TSERVERS.items()]


def master(i: int, *, leader: str = "m0", ready: bool | None = None,
           voters: list[str] = MASTERS) -> Answer:
    role = "LEADER" if f"m{i}" == leader else "FOLLOWER"
    return Answer(api.MasterStatus(f"m{i}", MASTERS[i], role, 3, leader, MASTERS[0],
                                   role == "LEADER" if ready is None else ready, voters),
                  None)


def replica(uuid: str, *, role: str = "FOLLOWER", state: str = "RUNNING", commit: int = 9,
            peers: list[Peer] = PEERS, tablet: str = TABLET) -> ReplicaInfo:
    return ReplicaInfo(tablet, state, "", role if state == "RUNNING" else "", 2, "a",
                       "a", (2, 9), commit, commit, 1, peers, "VOTER")


def healthy() -> Facts:
    tablet = api.TabletLocationInfo(TABLET, 0, "RUNNING", 2, [
        api.ReplicaLocationInfo(u, a, "VOTER", u == "a", True) for u, a in TSERVERS.items()])
    return Facts(
        masters={m: master(i) for i, m in enumerate(MASTERS)},
        tservers=[api.TabletServerEntry(u, a, True, 0.2, "REPORTING")
                  for u, a in TSERVERS.items()],
        tables=[(api.TableInfo("t", "tid", "RUNNING", 0, 1),
                 api.TableLocationsReply("tid", "t", 0, 1, [tablet]), None)],
        servers={a: Answer(ServerStatus(u, a, [replica(u, role="LEADER" if u == "a"
                                                       else "FOLLOWER")]), None)
                 for u, a in TSERVERS.items()},
        catalog_error=None)


def with_server(facts: Facts, uuid: str, *replicas: ReplicaInfo) -> Facts:
    address = TSERVERS[uuid]
    return attrs.evolve(facts, servers={**facts.servers, address: Answer(
        ServerStatus(uuid, address, list(replicas)), None)})


def tablet_of(doc: dict[str, Any]) -> dict[str, Any]:
    [table] = doc["tables"]
    [tablet] = table["tablets"]
    assert isinstance(tablet, dict)
    return tablet


def test_healthy() -> None:
    doc = check(healthy())
    assert doc["healthy"] and doc["problems"] == [] and doc["warnings"] == []
    assert tablet_of(doc)["status"] == "HEALTHY" and tablet_of(doc)["leader"] == "a"
    assert doc["summary"] == "HEALTHY: 3 masters, 3 tablet servers, 1 table, 1 tablet"


def test_a_replica_whose_config_differs_from_the_catalogs_is_a_mismatch() -> None:
    other = [PEERS[0], PEERS[1], Peer("d", "127.0.0.1:7054", "VOTER")]
    doc = check(with_server(healthy(), "c", replica("c", peers=other)))
    tablet = tablet_of(doc)
    assert not doc["healthy"] and tablet["status"] == "CONSENSUS_MISMATCH"
    assert [r["uuid"] for r in tablet["replicas"] if r["config_mismatch"]] == ["c"]
    assert any("config mismatch" in p and "c report otherwise" in p for p in doc["problems"])


def test_a_non_voter_where_the_catalog_has_a_voter_is_a_mismatch() -> None:
    demoted = [PEERS[0], PEERS[1], Peer("c", TSERVERS["c"], "NON_VOTER")]
    doc = check(with_server(healthy(), "b", replica("b", peers=demoted)))
    assert tablet_of(doc)["status"] == "CONSENSUS_MISMATCH"


def test_a_tombstone_where_the_catalog_places_a_replica_is_under_replication() -> None:
    doc = check(with_server(healthy(), "c", replica("c", state="TOMBSTONED")))
    tablet = tablet_of(doc)
    assert tablet["status"] == "UNDER_REPLICATED" and tablet["live_voters"] == 2
    [c] = [r for r in tablet["replicas"] if r["uuid"] == "c"]
    assert c["tombstoned"] and c["state"] == "TOMBSTONED"
    assert any("is a tombstone" in p for p in doc["problems"])
    assert "1 tablet(s) under-replicated" in doc["summary"]


def test_a_replica_not_hosted_is_under_replication() -> None:
    doc = check(with_server(healthy(), "b"))
    assert tablet_of(doc)["status"] == "UNDER_REPLICATED"
    assert any("is NOT_HOSTED" in p for p in doc["problems"])


def test_two_servers_unreachable_is_unavailable() -> None:
    facts = healthy()
    facts = attrs.evolve(facts, servers={
        **facts.servers, TSERVERS["b"]: Answer(None, "refused"),
        TSERVERS["c"]: Answer(None, "refused")})
    doc = check(facts)
    assert tablet_of(doc)["status"] == "UNAVAILABLE"
    assert sum("does not answer" in p for p in doc["problems"]) == 2
    assert "2 tablet server(s) dead or unreachable" in doc["summary"]


def test_a_dead_server_by_the_masters_view_is_named() -> None:
    facts = healthy()
    assert facts.tservers is not None
    facts = attrs.evolve(facts, tservers=[
        msgspec.structs.replace(t, live=False, seconds_since_heartbeat=9.0)
        if t.uuid == "b" else t for t in facts.tservers])
    doc = check(facts)
    assert not doc["healthy"]
    assert any(p.startswith("tablet server b (127.0.0.1:7052) is dead") for p in doc["problems"])


def test_no_leader_is_recovering() -> None:
    facts = healthy()
    for u in TSERVERS:
        facts = with_server(facts, u, replica(u, role="FOLLOWER"))
    doc = check(facts)
    assert tablet_of(doc)["status"] == "RECOVERING" and tablet_of(doc)["leader"] is None


def test_a_lagging_follower_is_a_warning_not_a_problem() -> None:
    doc = check(with_server(healthy(), "b", replica("b", commit=5)))
    assert doc["healthy"] and tablet_of(doc)["status"] == "HEALTHY"
    [b] = [r for r in tablet_of(doc)["replicas"] if r["uuid"] == "b"]
    assert b["lagging"] and not [r for r in tablet_of(doc)["replicas"]
                                 if r["lagging"] and r["uuid"] != "b"]
    assert len(doc["warnings"]) == 1 and "lagging" in doc["warnings"][0]


def test_a_tombstone_on_another_server_is_listed_not_a_problem() -> None:
    facts = healthy()
    facts = attrs.evolve(facts, servers={**facts.servers, "127.0.0.1:7054": Answer(
        ServerStatus("d", "127.0.0.1:7054", [replica("d", state="TOMBSTONED")]), None)})
    doc = check(facts)
    assert doc["healthy"] and tablet_of(doc)["tombstones_elsewhere"] == ["127.0.0.1:7054"]


def test_masters_unreachable_disagreeing_or_without_a_ready_leader() -> None:
    facts = healthy()
    down = attrs.evolve(facts, masters={**facts.masters, MASTERS[2]: Answer(None, "refused")})
    doc = check(down)
    assert not doc["healthy"] and "1 master(s) unreachable" in doc["summary"]
    split = attrs.evolve(facts, masters={**facts.masters, MASTERS[2]: master(2, leader="m2")})
    assert any("disagree on the leader" in p for p in check(split)["problems"])
    none_ready = attrs.evolve(facts, masters={m: master(i, ready=False)
                                              for i, m in enumerate(MASTERS)})
    assert "no ready leader master" in check(none_ready)["summary"]
    voters = attrs.evolve(facts, masters={**facts.masters,
                                          MASTERS[1]: master(1, voters=MASTERS[:1])})
    assert any("disagree on the catalog's voters" in p for p in check(voters)["problems"])


def test_the_tables_replica_count_from_the_locations_wins() -> None:
    facts = healthy()
    table, located, error = facts.tables[0]
    assert located is not None
    five = msgspec.structs.replace(located, num_replicas=5)
    doc = check(attrs.evolve(facts, tables=[(table, five, error)]))
    assert tablet_of(doc)["status"] == "UNDER_REPLICATED"
    assert tablet_of(doc)["replica_count"] == 5 and tablet_of(doc)["live_voters"] == 3
