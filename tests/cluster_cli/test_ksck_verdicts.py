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
           voters: list[str] = MASTERS, term: int = 3) -> Answer:
    role = "LEADER" if f"m{i}" == leader else "FOLLOWER"
    return Answer(api.MasterStatus(f"m{i}", MASTERS[i], role, term, leader, MASTERS[0],
                                   role == "LEADER" if ready is None else ready, voters),
                  None)


def replica(uuid: str, *, role: str = "FOLLOWER", state: str = "RUNNING", commit: int = 9,
            peers: list[Peer] = PEERS, tablet: str = TABLET, reason: str = "",
            term: int = 2) -> ReplicaInfo:
    return ReplicaInfo(tablet, state, reason, role if state == "RUNNING" else "", term, "a",
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


def test_masters_in_different_terms_disagree() -> None:
    """One master still in an older term (it has not heard from the leader since the last
    election) or campaigning in a newer one: named with the masters in each term."""
    facts = healthy()
    behind = attrs.evolve(facts, masters={**facts.masters, MASTERS[2]: master(2, term=2)})
    doc = check(behind)
    assert not doc["healthy"]
    [problem] = [p for p in doc["problems"] if "term" in p]
    assert problem == (f"the masters disagree on the term: term 2: {MASTERS[2]}; term 3: "
                       f"{MASTERS[0]}, {MASTERS[1]}")
    assert "the masters disagree on the term" in doc["summary"]
    assert [m["term"] for m in doc["masters"]] == [3, 3, 2]


def test_two_leaders_in_one_term_are_named() -> None:
    doc = check(with_server(healthy(), "b", replica("b", role="LEADER")))
    assert not doc["healthy"]
    assert tablet_of(doc)["status"] == "CONSENSUS_MISMATCH"
    assert "two leaders in term 2" in tablet_of(doc)["issues"]
    assert any("two leaders in term 2" in p for p in doc["problems"])


def test_the_leader_of_the_highest_term_is_the_tablets_leader() -> None:
    """A deposed leader that has not heard of the new term yet is not a second leader."""
    facts = with_server(healthy(), "b", replica("b", role="LEADER", term=3))
    doc = check(facts)
    assert tablet_of(doc)["leader"] == "b" and tablet_of(doc)["term"] == 3
    assert not any("two leaders" in p for p in doc["problems"])


def test_a_failed_replica_is_named_with_its_reason() -> None:
    failed = replica("c", state="FAILED", reason="WAL segment 3: checksum mismatch")
    doc = check(with_server(healthy(), "c", failed))
    tablet = tablet_of(doc)
    assert tablet["status"] == "UNDER_REPLICATED" and tablet["live_voters"] == 2
    assert any("is FAILED (WAL segment 3: checksum mismatch)" in p for p in doc["problems"])


def test_a_wiped_server_answering_as_another_uuid() -> None:
    """The catalog places replica c at an address where a server with a new UUID answers
    (its directory wiped): neither the server nor the replica counts."""
    facts = healthy()
    address = TSERVERS["c"]
    facts = attrs.evolve(facts, servers={**facts.servers, address: Answer(
        ServerStatus("c2", address, []), None)})
    doc = check(facts)
    [c] = [r for r in tablet_of(doc)["replicas"] if r["uuid"] == "c"]
    assert c["state"] == "WRONG_SERVER" and tablet_of(doc)["status"] == "UNDER_REPLICATED"
    [row] = [t for t in doc["tservers"] if t["uuid"] == "c"]
    assert not row["answers"] and "answers as c2, not c (wiped?)" in row["error"]


def test_a_tablet_not_running_in_the_catalog_is_recovering() -> None:
    facts = healthy()
    table, located, _ = facts.tables[0]
    assert located is not None
    creating = msgspec.structs.replace(located, tablets=[
        msgspec.structs.replace(located.tablets[0], state="CREATING")])
    doc = check(attrs.evolve(facts, tables=[(table, creating, None)]))
    assert tablet_of(doc)["status"] == "RECOVERING"
    assert "CREATING in the catalog" in tablet_of(doc)["issues"]


def test_the_leader_master_not_answering_for_the_catalog() -> None:
    facts = attrs.evolve(healthy(), tservers=None, tables=[],
                         catalog_error="Master.ListTabletServers: out of time")
    doc = check(facts)
    assert not doc["healthy"] and doc["tservers"] == [] and doc["tables"] == []
    assert ("the leader master did not answer: Master.ListTabletServers: out of time"
            in doc["problems"])


def test_a_table_without_locations_is_unknown() -> None:
    facts = healthy()
    table, _, _ = facts.tables[0]
    doc = check(attrs.evolve(facts, tables=[(table, None, "table 't' not found")]))
    [row] = doc["tables"]
    assert row["status"] == "UNKNOWN" and row["tablets"] == []
    assert "table t: no locations: table 't' not found" in doc["problems"]


def test_the_text_names_every_problem_and_details_each_unhealthy_tablet() -> None:
    """What a person reads (plain, as in a pipe): the tables, the detail of the tablet that
    is not healthy with each replica's note, the problems, then the summary line."""
    from revivify.impl.cli.ksck import _text

    other = [PEERS[0], PEERS[1], Peer("d", "127.0.0.1:7054", "VOTER")]
    facts = with_server(healthy(), "b", replica("b", commit=5))
    facts = with_server(facts, "c", replica("c", peers=other))
    doc = check(facts)
    text = _text(doc)
    lines = text.splitlines()
    assert lines[0] == "Masters" and "Tablet servers" in lines and "Tables" in lines
    detail = lines.index(f"Tablet {TABLET} of t: CONSENSUS_MISMATCH (3 of 3 voters live)")
    replicas = lines[detail + 1:lines.index("Problems")]
    assert replicas[0].split()[:2] == ["UUID", "ADDRESS"] and replicas[0].endswith("NOTE")
    [b] = [line for line in replicas if line.startswith("b ")]
    [c] = [line for line in replicas if line.startswith("c ")]
    assert b.endswith("lagging") and c.endswith("config mismatch")
    assert "Problems" in lines and "Warnings" in lines
    assert lines[-1] == f"ksck: {doc['summary']}"
    assert lines[-1].startswith("ksck: NOT HEALTHY: 1 tablet(s) consensus-mismatch")
