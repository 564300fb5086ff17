"""The web addresses added to the heartbeat, its answer, Master.Status and the tablet-server
list are optional fields: a message from a server older than them decodes (as ""), and an
older reader decodes a new message (msgspec skips a field it does not know)."""

from __future__ import annotations

import msgspec

from revivify.impl.master import api
from revivify.impl.tserver.master_api import Heartbeat, HeartbeatResponse, Registration


class OldHeartbeat(msgspec.Struct, frozen=True):
    server_uuid: str
    incarnation: int
    registration: Registration | None = None
    report: None = None


class OldEntry(msgspec.Struct, frozen=True):
    uuid: str
    address: str
    live: bool
    seconds_since_heartbeat: float
    state: str


def test_an_old_heartbeat_decodes_without_a_web_address() -> None:
    old = msgspec.msgpack.encode(OldHeartbeat("ts-1", 3, Registration("127.0.0.1:7050")))
    hb = msgspec.msgpack.decode(old, type=Heartbeat)
    assert (hb.server_uuid, hb.incarnation, hb.web_address) == ("ts-1", 3, "")
    assert hb.registration == Registration("127.0.0.1:7050")


def test_a_new_heartbeat_decodes_for_an_old_reader() -> None:
    new = msgspec.msgpack.encode(Heartbeat("ts-1", 3, web_address="127.0.0.1:8050"))
    assert msgspec.msgpack.decode(new, type=OldHeartbeat) == OldHeartbeat("ts-1", 3)
    assert msgspec.msgpack.decode(new, type=Heartbeat).web_address == "127.0.0.1:8050"


def test_answers_and_lists_carry_web_addresses_optionally() -> None:
    answer = msgspec.msgpack.decode(
        msgspec.msgpack.encode({"master_uuid": "m", "leader": True, "term": 2}),
        type=HeartbeatResponse)
    assert answer.web_address == "" and answer.places == {}
    entry = msgspec.msgpack.decode(msgspec.msgpack.encode(
        OldEntry("ts-1", "127.0.0.1:7050", True, 0.5, "REPORTING")), type=api.TabletServerEntry)
    assert entry.web_address == "" and entry.live
    status = api.MasterStatus("m", "127.0.0.1:7051", "LEADER", 2, "m", "127.0.0.1:7051",
                              True, ["127.0.0.1:7051"], 1, "127.0.0.1:8051")
    again = msgspec.msgpack.decode(msgspec.msgpack.encode(status), type=api.MasterStatus)
    assert again.web_address == "127.0.0.1:8051"
