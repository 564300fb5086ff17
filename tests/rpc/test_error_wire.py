"""Every travelling error's response, pinned byte for byte.

An error crosses the wire as a response envelope with its code, its message and its data (a
msgpack map of its fields, in their declared order). The bytes below were encoded before
the errors' data moved from hand-written ``to_data``/``from_data`` pairs to one declared
mechanism (``fields``, impl/rpc/errors.py), so servers and clients from either side of that
change understand each other. A change to any of these bytes is a wire-format change.
"""

from __future__ import annotations

import pytest

from revivify.impl.master import api as ma
from revivify.impl.rpc.codec import (
    decode_response,
    encode_response,
    error_from_response,
    error_registry,
    error_response,
)
from revivify.impl.rpc.errors import (
    AppError,
    InternalError,
    MalformedRequest,
    RpcError,
    ServerShuttingDown,
    UnknownMethod,
    WrongServerUuid,
)
from revivify.impl.tserver import api as ts
from revivify.impl.tserver.copy import api as copy

ERRORS: dict[str, RpcError] = {
    "wrong_server_uuid": WrongServerUuid(expected="ts-a", got="ts-b"),
    "unknown_method": UnknownMethod("Admin.Nope"),
    "malformed_request": MalformedRequest("Expected `int`, got `str`", "peers[0].term"),
    "malformed_request_no_field": MalformedRequest("not msgpack"),
    "internal": InternalError("Data.Write", "KeyError", "'x'"),
    "shutting_down": ServerShuttingDown("ts-1"),
    "not_leader": ts.NotLeader("ts-2", "127.0.0.1:7051", 4, "stepping down"),
    "not_leader_unknown": ts.NotLeader(None, None, 0),
    "tablet_not_found": ts.TabletNotFound("t1"),
    "tablet_not_running": ts.TabletNotRunning("t1", "STARTING", "opening"),
    "config_change_refused": ts.ConfigChangeRefused("CAS_FAILED", "index 3", 3),
    "copy_refused": ts.CopyRefused("THROTTLED", "pool full"),
    "no_such_session": copy.NoSuchSession("s1"),
    "master_not_leader": ma.MasterNotLeader("m-1", "127.0.0.1:7051", 2),
    "refused": ma.Refused("NOT_FOUND", "no table x", 0),
    "stale_catalog": ma.StaleCatalog(-1, 500, 12),
}

PINNED: dict[str, str] = {
    "wrong_server_uuid": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b57270632e77726f6e67"
        "5f7365727665725f75756964ad6572726f725f6d657373616765d94172657175657374206164647265737365"
        "6420746f20736572766572202774732d6227207265616368656420736572766572202774732d61273b207265"
        "6675736564aa6572726f725f6461746182a86578706563746564a474732d61a3676f74a474732d62"
    ),
    "unknown_method": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b27270632e756e6b6e6f"
        "776e5f6d6574686f64ad6572726f725f6d657373616765bb756e6b6e6f776e206d6574686f64202741646d69"
        "6e2e4e6f706527aa6572726f725f6461746181a66d6574686f64aa41646d696e2e4e6f7065"
    ),
    "malformed_request": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b57270632e6d616c666f"
        "726d65645f72657175657374ad6572726f725f6d657373616765d9446d616c666f726d656420726571756573"
        "7420286669656c64202770656572735b305d2e7465726d27293a2045787065637465642060696e74602c2067"
        "6f74206073747260aa6572726f725f6461746182a6726561736f6eb945787065637465642060696e74602c20"
        "676f74206073747260a56669656c64ad70656572735b305d2e7465726d"
    ),
    "malformed_request_no_field": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b57270632e6d616c666f"
        "726d65645f72657175657374ad6572726f725f6d657373616765be6d616c666f726d65642072657175657374"
        "3a206e6f74206d73677061636baa6572726f725f6461746182a6726561736f6eab6e6f74206d73677061636b"
        "a56669656c64c0"
    ),
    "internal": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465ac7270632e696e746572"
        "6e616cad6572726f725f6d657373616765d92d696e7465726e616c206572726f7220696e2027446174612e57"
        "72697465273a204b65794572726f723a20277827aa6572726f725f6461746183a66d6574686f64aa44617461"
        "2e5772697465ae657863657074696f6e5f74797065a84b65794572726f72a664657461696ca3277827"
    ),
    "shutting_down": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b17270632e7368757474"
        "696e675f646f776ead6572726f725f6d657373616765d92c736572766572202774732d312720697320736875"
        "7474696e6720646f776e3b2063616c6c206e6f742072756eaa6572726f725f6461746181ab7365727665725f"
        "75756964a474732d31"
    ),
    "not_leader": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b2747365727665722e6e"
        "6f745f6c6561646572ad6572726f725f6d657373616765d9426e6f7420746865206c65616465722028746572"
        "6d2034293b207472792074732d32206174203132372e302e302e313a373035313a207374657070696e672064"
        "6f776eaa6572726f725f6461746183ab6c65616465725f75756964a474732d32ae6c65616465725f61646472"
        "657373ae3132372e302e302e313a37303531a47465726d04"
    ),
    "not_leader_unknown": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b2747365727665722e6e"
        "6f745f6c6561646572ad6572726f725f6d657373616765b76e6f7420746865206c656164657220287465726d"
        "203029aa6572726f725f6461746183ab6c65616465725f75756964c0ae6c65616465725f61646472657373c0"
        "a47465726d00"
    ),
    "tablet_not_found": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b8747365727665722e74"
        "61626c65745f6e6f745f666f756e64ad6572726f725f6d657373616765bc7461626c6574207431206973206e"
        "6f7420686f737465642068657265aa6572726f725f6461746181a97461626c65745f6964a27431"
    ),
    "tablet_not_running": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465ba747365727665722e74"
        "61626c65745f6e6f745f72756e6e696e67ad6572726f725f6d657373616765be7461626c6574207431206973"
        "205354415254494e473a206f70656e696e67aa6572726f725f6461746183a97461626c65745f6964a27431a5"
        "7374617465a85354415254494e47a6726561736f6ea76f70656e696e67"
    ),
    "config_change_refused": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465bd747365727665722e63"
        "6f6e6669675f6368616e67655f72656675736564ad6572726f725f6d657373616765d92b636f6e6669672063"
        "68616e6765207265667573656420284341535f4641494c4544293a20696e6465782033aa6572726f725f6461"
        "746183a6726561736f6eaa4341535f4641494c4544a664657461696ca7696e6465782033af636f6d6d697474"
        "65645f696e64657803"
    ),
    "copy_refused": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b4747365727665722e63"
        "6f70795f72656675736564ad6572726f725f6d657373616765d92a7461626c657420636f7079207265667573"
        "656420285448524f54544c4544293a20706f6f6c2066756c6caa6572726f725f6461746182a6726561736f6e"
        "a95448524f54544c4544a664657461696ca9706f6f6c2066756c6c"
    ),
    "no_such_session": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b4636f70792e6e6f5f73"
        "7563685f73657373696f6ead6572726f725f6d657373616765d93b6e6f207461626c657420636f7079207365"
        "7373696f6e202773312720286e6576657220626567756e2c20656e646564206f72206578706972656429aa65"
        "72726f725f6461746181aa73657373696f6e5f6964a27331"
    ),
    "master_not_leader": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b16d61737465722e6e6f"
        "745f6c6561646572ad6572726f725f6d657373616765d94174686973206d6173746572206973206e6f742074"
        "6865206c656164657220287465726d2032293b20747279206d2d31206174203132372e302e302e313a373035"
        "31aa6572726f725f6461746183ab6c65616465725f75756964a36d2d31ae6c65616465725f61646472657373"
        "ae3132372e302e302e313a37303531a47465726d02"
    ),
    "refused": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465ae6d61737465722e7265"
        "6675736564ad6572726f725f6d657373616765b54e4f545f464f554e443a206e6f207461626c652078aa6572"
        "726f725f6461746183a6726561736f6ea94e4f545f464f554e44a664657461696caa6e6f207461626c652078"
        "a9726574727961626c6500"
    ),
    "stale_catalog": (
        "86a763616c6c5f696407a76c616d706f727403a26f6bc2aa6572726f725f636f6465b46d61737465722e7374"
        "616c655f636174616c6f67ad6572726f725f6d657373616765d97a7468697320666f6c6c6f77657227732063"
        "6174616c6f6720286170706c69656420696e64657820313229206973207374616c653a20756e6b6e6f776e20"
        "286e6f207265616420696e6465782066726f6d20746865206c65616465722079657429206f6c642c20746865"
        "20626f756e6420697320302e3530302073aa6572726f725f6461746183ac7374616c656e6573735f6d73ffa8"
        "626f756e645f6d73cd01f4ad6170706c6965645f696e6465780c"
    ),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error_response_bytes_are_pinned(name: str) -> None:
    error = ERRORS[name]
    assert isinstance(error, (WrongServerUuid, UnknownMethod, MalformedRequest, InternalError,
                              ServerShuttingDown, AppError))
    assert encode_response(error_response(7, 3, error)).hex() == PINNED[name]


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_pinned_bytes_decode_to_the_same_error(name: str) -> None:
    error = ERRORS[name]
    registry = error_registry([*ts.APP_ERRORS, *copy.COPY_ERRORS, *ma.APP_ERRORS])
    back = error_from_response(decode_response(bytes.fromhex(PINNED[name])), registry)
    assert type(back) is type(error)
    assert back.to_data() == error.to_data()
    # NotLeader's ``detail`` is in its message only, not in its data: the error rebuilt from
    # the data says the rest (as it always has).
    expected = ts.NotLeader("ts-2", "127.0.0.1:7051", 4) if name == "not_leader" else error
    assert str(back) == str(expected)


def test_a_missing_field_takes_the_constructor_default_then_the_family_rule() -> None:
    # The constructor's default first (MalformedRequest's field=None) ...
    assert MalformedRequest.from_data("?", {"reason": "x"}).to_data() == {
        "reason": "x", "field": None}
    # ... then this package's own errors do not fit (the codec raises RemoteError) ...
    with pytest.raises(KeyError):
        WrongServerUuid.from_data("?", {"expected": "a"})
    # ... and an AppError's field an older server left out arrives as "".
    assert ts.TabletNotRunning.from_data("?", {"tablet_id": "t1", "state": "STARTING"}
                                         ).to_data() == {
        "tablet_id": "t1", "state": "STARTING", "reason": ""}
