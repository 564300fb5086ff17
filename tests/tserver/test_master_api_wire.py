"""The tablet server's wire with its masters (impl/tserver/master_api.py), pinned byte for byte.

These structs moved from the master's package to the tablet server's (the master embeds a
tablet server, so the tablet server may not import the master); the bytes below were
encoded before the move, so a master and a tablet server of either side of it still
understand each other. A change to any of these bytes is a wire-format change.

Since then, fields were only *added*, each optional (issue 30: the status pages' addresses
and the tablets' places): a value encodes as the pinned bytes with the map one entry longer
per added field and those entries at the end (ADDED), so the old bytes still decode, and an
older reader skips the new entries.
"""

from __future__ import annotations

import msgspec

from revivify.impl.consensus.messages import Config, Peer
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.master_api import (
    AlterSchema,
    Heartbeat,
    HeartbeatResponse,
    Registration,
    ReportedConsensus,
    ReportedReplica,
    TabletReport,
)

CONFIG = Config(3, (Peer("aaaa", "127.0.0.1:7050"),
                    Peer("bbbb", "127.0.0.1:7051", "NON_VOTER", True)))

ALTER = AlterSchema("t1", 2, [Column("key", key=True), Column("v", "int64")])
HEARTBEAT = Heartbeat("s1", 4, Registration("127.0.0.1:7050"), TabletReport(True, 0, [
    ReportedReplica("t1", "RUNNING", ReportedConsensus(5, "aaaa", CONFIG), 2),
    ReportedReplica("t2", "FAILED", None, None, "disk")]))
RESPONSE = HeartbeatResponse("m1", True, 7, False, True, ["127.0.0.1:7051"], 9)

PINNED: dict[str, tuple[object, str]] = {
    "alter": (ALTER, (
        "83a97461626c65745f6964a27431ae736368656d615f76657273696f6e02a6736368656d619283a46e616d65"
        "a36b6579a474797065a662696e617279a36b6579c383a46e616d65a176a474797065a5696e743634a36b6579"
        "c2"
    )),
    "heartbeat": (HEARTBEAT, (
        "84ab7365727665725f75756964a27331ab696e6361726e6174696f6e04ac726567697374726174696f6e81a7"
        "61646472657373ae3132372e302e302e313a37303530a67265706f727483a466756c6cc3a373657100a87265"
        "706c696361739285a97461626c65745f6964a27431a57374617465a752554e4e494e47a9636f6e73656e7375"
        "7383a47465726d05a66c6561646572a461616161a6636f6e66696782aa6f7069645f696e64657803a5706565"
        "72739284a475756964a461616161a761646472657373ae3132372e302e302e313a37303530ab6d656d626572"
        "5f74797065a5564f544552a770726f6d6f7465c284a475756964a462626262a761646472657373ae3132372e"
        "302e302e313a37303531ab6d656d6265725f74797065a94e4f4e5f564f544552a770726f6d6f7465c3ae7363"
        "68656d615f76657273696f6e02a56572726f72a085a97461626c65745f6964a27432a57374617465a6464149"
        "4c4544a9636f6e73656e737573c0ae736368656d615f76657273696f6ec0a56572726f72a46469736b"
    )),
    "response": (RESPONSE, (
        "87ab6d61737465725f75756964a26d31a66c6561646572c3a47465726d07ae6e656564735f72656769737465"
        "72c2b16e656564735f66756c6c5f7265706f7274c3a76d61737465727391ae3132372e302e302e313a373035"
        "31ad6d6173746572735f696e64657809"
    )),
}


# Fields added after the pin, in order, with the values the pinned values have for them.
ADDED: dict[str, dict[str, object]] = {
    "alter": {},
    "heartbeat": {"web_address": ""},
    "response": {"web_address": "", "places": {}},
}


def _extended(hex_bytes: str, added: dict[str, object]) -> str:
    """The pinned map (a msgpack fixmap) with ``added`` appended as entries."""
    pinned = bytes.fromhex(hex_bytes)
    assert pinned[0] & 0xF0 == 0x80 and (pinned[0] & 0x0F) + len(added) <= 15
    tail = b"".join(msgspec.msgpack.encode(k) + msgspec.msgpack.encode(v)
                    for k, v in added.items())
    return (bytes([pinned[0] + len(added)]) + pinned[1:] + tail).hex()


def test_encodings_are_pinned() -> None:
    for name, (value, hex_bytes) in PINNED.items():
        assert msgspec.msgpack.encode(value).hex() == _extended(hex_bytes, ADDED[name]), name


def test_pinned_bytes_decode_to_the_same_values() -> None:
    for name, (value, hex_bytes) in PINNED.items():
        assert msgspec.msgpack.decode(bytes.fromhex(hex_bytes), type=type(value)) == value, name
