"""One vocabulary for a replica (issue 31): every command's and page's replica document
has ``uuid``, ``address``, ``member_type``, ``role`` and ``live``, and "leader" is said
one way, ``role: LEADER`` (impl/client/documents.py). A NON_VOTER is a LEARNER wherever it
is shown (its own Raft core calls itself a FOLLOWER). And ``master list``'s rows: the
catalog's whole config, whichever masters answered."""

from __future__ import annotations

from revivify.impl.cli import render
from revivify.impl.client.admin import ReplicaStatus, TabletStatus
from revivify.impl.client.documents import (
    location_replica_doc,
    master_list_docs,
    master_status_doc,
    member_role,
    replica_doc,
    server_status_doc,
    tablet_location_doc,
)
from revivify.impl.consensus.messages import Peer
from revivify.impl.master import api
from revivify.impl.tserver.api import ReplicaInfo, ServerStatus

VOCABULARY = {"uuid", "address", "member_type", "role", "live"}


def info(role: str, member_type: str, tablet: str = "t-1") -> ReplicaInfo:
    return ReplicaInfo(tablet, "RUNNING", "", role, 3, None, "ts-1", (3, 7), 7, 7, 5,
                       [Peer("ts-1", "h:1"), Peer("ts-2", "h:2", "NON_VOTER")], member_type)


def test_member_role() -> None:
    assert member_role("FOLLOWER", "VOTER") == "FOLLOWER"
    assert member_role("FOLLOWER", "NON_VOTER") == "LEARNER"
    assert member_role("LEADER", "VOTER") == "LEADER"
    assert member_role("FOLLOWER", "VOTER", leader=True) == "LEADER"
    assert member_role("", "NONE") == ""  # not running: no role claimed


def test_every_replica_document_speaks_the_one_vocabulary() -> None:
    listed = server_status_doc(ServerStatus("ts-2", "h:2", [info("FOLLOWER", "NON_VOTER")]))
    one = listed["replicas"][0]
    assert set(one) >= VOCABULARY and "leader" not in one
    assert (one["uuid"], one["address"], one["role"], one["live"]) == \
        ("ts-2", "h:2", "LEARNER", True)
    assert one["leader_uuid"] == "ts-1"

    located = tablet_location_doc(api.TabletLocationInfo("t-1", 0, "RUNNING", 3, [
        api.ReplicaLocationInfo("ts-1", "h:1", "VOTER", True, True),
        api.ReplicaLocationInfo("ts-2", "h:2", "NON_VOTER", False, False),
        api.ReplicaLocationInfo("ts-3", "h:3", "VOTER", False, True)]))
    rows = located["replicas"]
    assert all(set(r) == VOCABULARY for r in rows)
    assert [r["role"] for r in rows] == ["LEADER", "LEARNER", "FOLLOWER"]
    assert [r["live"] for r in rows] == [True, False, True]
    assert location_replica_doc(api.ReplicaLocationInfo("a", "h:9", "VOTER", False, True)) \
        == {"uuid": "a", "address": "h:9", "member_type": "VOTER", "role": "FOLLOWER",
            "live": True}

    status = render.tablet_status_doc(TabletStatus("t-1", [
        ReplicaStatus("h:1", "ts-1", info("LEADER", "VOTER"), None, True),
        ReplicaStatus("h:9", None, None, "unreachable: connection refused", False,
                      "unreachable")]))
    answered, silent = status["replicas"]
    assert set(answered) >= VOCABULARY and answered["role"] == "LEADER"
    assert (answered["uuid"], answered["live"]) == ("ts-1", True)
    assert silent["live"] is False and "reachable" not in silent
    assert status["leader"] == "ts-1"  # the tablet's leader, not a replica's word
    doc = replica_doc(info("FOLLOWER", "VOTER"), "ts-3", "h:3", live=True)
    assert doc["role"] == "FOLLOWER" and doc["member_type"] == "VOTER"


def master(uuid: str, address: str, role: str, members: list[api.MasterMember],
           index: int = 9) -> api.MasterStatus:
    return api.MasterStatus(uuid, address, role, 4, "m-1", "h:1", role == "LEADER",
                            [m.address for m in members], index, "", members)


def test_master_list_is_the_config_not_the_addresses_named() -> None:
    members = [api.MasterMember("m-1", "h:1", "VOTER"), api.MasterMember("m-2", "h:2", "VOTER"),
               api.MasterMember("m-3", "h:3", "VOTER"),
               api.MasterMember("m-4", "h:4", "NON_VOTER")]
    leader = master("m-1", "h:1", "LEADER", members)
    # Only h:1 was named; h:2 and h:4 answered when asked as members, h:3 did not.
    answers: dict[str, api.MasterStatus | str] = {
        "h:1": leader, "h:2": master("m-2", "h:2", "FOLLOWER", members),
        "h:3": "connection refused", "h:4": master("m-4", "h:4", "FOLLOWER", members)}
    rows = master_list_docs(leader, answers)
    assert [(r["address"], r["uuid"], r["member_type"], r["role"], r["live"])
            for r in rows] == [
        ("h:1", "m-1", "VOTER", "LEADER", True),
        ("h:2", "m-2", "VOTER", "FOLLOWER", True),
        ("h:3", "m-3", "VOTER", None, False),
        ("h:4", "m-4", "NON_VOTER", "LEARNER", True)]
    assert rows[2]["error"] == "connection refused"
    # A master named that the config does not hold is shown as such, not dropped.
    stray = master_list_docs(leader, {**answers, "h:7": "connection refused"})
    assert stray[-1]["address"] == "h:7" and stray[-1]["member_type"] is None
    # No config heard of: the addresses named, each not live.
    assert [(r["address"], r["live"]) for r in master_list_docs(None, {"h:1": "x"})] == \
        [("h:1", False)]
    doc = master_status_doc(leader)
    assert [(m["uuid"], m["member_type"]) for m in doc["masters"]] == \
        [("m-1", "VOTER"), ("m-2", "VOTER"), ("m-3", "VOTER"), ("m-4", "NON_VOTER")]
