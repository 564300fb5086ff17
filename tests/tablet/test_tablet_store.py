"""TabletStore: apply / get / scan semantics, exactly-once, flush, compaction, bootstrap,
corruption, superblock preservation, concurrency with a flush."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import msgspec
import pytest
from tablet_helpers import (
    ROOT,
    TABLET,
    SimDisk,
    new_tablet_disk,
    open_store,
    put_batch,
)

from revivify.impl.storage.blocks import BlockManager, decode_block, replace_live_blocks
from revivify.impl.storage.errors import BlockProtocolError
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import (
    MetadataStore,
    decode_superblock,
    encode_superblock,
)
from revivify.impl.storage.values import ClientResult, DataState, OpId, Superblock
from revivify.impl.tablet.errors import (
    ApplyOutOfOrder,
    TabletDataCorrupt,
    TabletStateError,
    TabletStoreFailed,
)
from revivify.impl.tablet.ops import RowOp, WriteBatch, encode_write, put
from revivify.impl.tablet.store import ApplyResult, StoreOptions, TabletStore


def _metadata(disk: SimDisk) -> MetadataStore:
    return MetadataStore(ServerLayout(ROOT, disk))


def _superblock(disk: SimDisk) -> Superblock:
    superblock = _metadata(disk).load_superblock(TABLET)
    assert superblock is not None
    return superblock


def _block_path(block_id: str) -> str:
    return f"{ROOT}/data/{block_id}"


# ----------------------------------------------------------------------- apply, get, scan


def test_put_get_delete_scan() -> None:
    store = open_store(new_tablet_disk())
    assert store.applied_index == 0 and store.flushed_opid is None
    result = store.apply(1, 1, put_batch("c", 1, [(b"b", b"2"), (b"a", b"1"), (b"c", b"3")]))
    assert result == ApplyResult(index=1, ops_applied=3)
    assert store.get(b"a") == b"1" and store.get(b"z") is None
    store.apply(2, 1, put_batch("c", 2, [(b"b", None), (b"a", b"1'"), (b"a", b"1''")]))
    assert store.get(b"b") is None and store.get(b"a") == b"1''"
    assert store.scan() == [(b"a", b"1''"), (b"c", b"3")]
    assert store.scan(b"b", None, None) == [(b"c", b"3")]
    assert store.scan(None, b"c", None) == [(b"a", b"1''")]
    assert store.scan(None, None, 1) == [(b"a", b"1''")]
    assert store.scan(None, None, 0) == []
    assert store.scan(b"c", b"a") == []
    with pytest.raises(ValueError):
        store.scan(limit=-1)
    assert (store.applied_index, store.applied_term) == (2, 1)


def test_scan_merges_layers_newest_wins() -> None:
    store = open_store(new_tablet_disk())
    store.apply(1, 1, put_batch("c", 1, [(b"%02d" % i, b"old") for i in range(10)]))
    store.flush()
    store.apply(2, 1, put_batch("c", 2, [(b"03", None), (b"05", b"new"), (b"10", b"new")]))
    store.flush()
    store.apply(3, 2, put_batch("c", 3, [(b"05", None), (b"06", b"mem"), (b"03", b"back")]))
    expected = {b"%02d" % i: b"old" for i in range(10)}
    expected.update({b"10": b"new", b"06": b"mem", b"03": b"back"})
    del expected[b"05"]
    assert store.scan() == sorted(expected.items())
    assert store.scan(b"04", b"07", 2) == [(b"04", b"old"), (b"06", b"mem")]
    assert store.scan(b"05", b"07") == [(b"06", b"mem")]
    assert store.get(b"05") is None and store.get(b"03") == b"back"


def test_apply_order_is_enforced() -> None:
    store = open_store(new_tablet_disk())
    store.apply_noop(1, 2)
    with pytest.raises(ApplyOutOfOrder) as exc:
        store.apply(3, 2, put_batch("c", 1, [(b"k", b"v")]))
    assert exc.value.applied_index == 1 and exc.value.index == 3
    with pytest.raises(ApplyOutOfOrder):
        store.apply_config(1, 2)
    with pytest.raises(ApplyOutOfOrder, match="term below"):
        store.apply_noop(2, 1)
    assert store.applied_index == 1 and store.get(b"k") is None
    store.apply_config(2, 3)
    assert (store.applied_index, store.applied_term) == (2, 3)


def test_apply_entry_dispatches_on_kind() -> None:
    store = open_store(new_tablet_disk())
    assert store.apply_entry(1, 1, "noop", b"") is None
    assert store.apply_entry(2, 1, "config", b"whatever") is None
    result = store.apply_entry(3, 1, "write", encode_write(put_batch("c", 1, [(b"k", b"v")])))
    assert result == ApplyResult(3, 1)
    with pytest.raises(ValueError):
        store.apply_entry(4, 1, "bogus", b"")  # type: ignore[arg-type]
    assert store.applied_index == 3


# ----------------------------------------------------------------------- exactly-once


def test_duplicate_and_stale_seqs() -> None:
    store = open_store(new_tablet_disk())
    first = store.apply(1, 1, put_batch("a", 5, [(b"k", b"1")]))
    store.apply(2, 1, put_batch("b", 1, [(b"k", b"2")]))
    retry = store.apply(3, 1, put_batch("a", 5, [(b"k", b"1")]))
    assert retry == attrs.evolve(first, duplicate=True)
    assert store.get(b"k") == b"2", "a duplicate must not be re-applied"
    stale = store.apply(4, 1, put_batch("a", 4, [(b"k", b"stale")]))
    assert stale == ApplyResult(4, 0, duplicate=True, stale=True)
    assert store.get(b"k") == b"2" and store.applied_index == 4
    assert store.lookup_result("a", 5) == retry
    assert store.lookup_result("a", 6) is None and store.lookup_result("x", 1) is None
    assert store.lookup_result("a", 1) is not None and store.lookup_result("a", 1).stale  # type: ignore[union-attr]
    # A gap in seqs is fine: the client may have abandoned some.
    assert store.apply(5, 1, put_batch("a", 9, [(b"k", b"3")])) == ApplyResult(5, 1)


def test_exactly_once_across_flush_and_reopen() -> None:
    disk = new_tablet_disk()
    store = open_store(disk)
    first = store.apply(1, 1, put_batch("a", 1, [(b"k", b"1")]))
    store.apply(2, 1, put_batch("b", 7, [(b"j", b"2")]))
    assert store.flush() == OpId(1, 2)
    after_flush = store.apply(3, 2, put_batch("a", 2, [(b"k", b"x")]))
    assert after_flush == ApplyResult(3, 1)

    reopened = open_store(disk.crash())
    assert reopened.applied_index == 2 and reopened.applied_term == 1
    assert reopened.scan() == [(b"j", b"2"), (b"k", b"1")]
    # The retry of a flushed write is still recognised after the restart...
    assert reopened.lookup_result("a", 1) == attrs.evolve(first, duplicate=True)
    # ...and replaying the WAL above the flushed index gives the same results.
    assert reopened.apply(3, 2, put_batch("a", 2, [(b"k", b"x")])) == after_flush
    assert reopened.apply(4, 2, put_batch("a", 2, [(b"k", b"y")])).duplicate
    assert reopened.apply(5, 2, put_batch("b", 7, [(b"j", b"y")])) == ApplyResult(
        2, 1, duplicate=True
    )
    assert reopened.get(b"k") == b"x" and reopened.get(b"j") == b"2"
    clients = _superblock(disk).client_results
    assert [c.client_id for c in clients] == ["a", "b"]


def test_invalid_committed_write_is_rejected_deterministically() -> None:
    store = open_store(new_tablet_disk())
    bad = WriteBatch("c", 1, [put(b"k", b"v"), RowOp("put", b"", b"v")])
    result = store.apply(1, 1, bad)
    assert result.rejected and result.ops_applied == 0 and "op 1" in (result.error or "")
    assert store.get(b"k") is None and store.applied_index == 1
    retry = store.apply(2, 1, bad)
    assert retry.duplicate and retry.error == result.error and retry.index == 1
    nameless = store.apply(3, 1, WriteBatch("", 1, [put(b"k", b"v")]))
    assert nameless.rejected and not nameless.duplicate
    assert store.client_result("") is None
    garbage = store.apply_payload(4, 1, b"\xc1 not msgpack")
    assert garbage.rejected and "malformed" in (garbage.error or "")
    assert store.applied_index == 4
    ok = store.apply_payload(5, 1, encode_write(put_batch("c", 2, [(b"k", b"v")])))
    assert ok == ApplyResult(5, 1) and store.get(b"k") == b"v"


# ----------------------------------------------------------------------- flush


def test_flush_writes_one_block_and_superblock_atomically() -> None:
    disk = new_tablet_disk(
        tombstone_last_opid=OpId(1, 1), quarantine_dir="/q", table_name="t", schema=("k",)
    )
    store = open_store(disk)
    assert store.flush() is None and store.live_blocks == ()  # nothing applied
    store.apply(1, 3, put_batch("c", 1, [(b"a", b"1"), (b"b", b"2")]))
    assert store.memory_bytes > 0 and store.should_flush(1)
    assert not store.should_flush(10**6)
    assert store.flush() == OpId(3, 1)
    assert store.memory_bytes == 0 and not store.should_flush(0)
    superblock = _superblock(disk)
    assert superblock.live_blocks == store.live_blocks and len(store.live_blocks) == 1
    assert superblock.flushed_opid == OpId(3, 1) == store.flushed_opid
    assert superblock.client_results == (ClientResult("c", 1, 1, 2),)
    # Everything else in the superblock is preserved.
    assert (superblock.tombstone_last_opid, superblock.quarantine_dir) == (OpId(1, 1), "/q")
    assert (superblock.table_name, superblock.schema) == ("t", ("k",))
    assert superblock.data_state is DataState.READY
    # Nothing new applied: flush is a no-op returning the same OpId.
    writes = disk.op_count
    assert store.flush() == OpId(3, 1) and disk.op_count == writes


def test_flush_keeps_only_markers_that_shadow_something() -> None:
    disk = new_tablet_disk()
    store = open_store(disk)
    store.apply(1, 1, put_batch("c", 1, [(b"old", b"1")]))
    store.flush()
    store.apply(2, 1, put_batch("c", 2, [(b"old", None), (b"new", b"2"), (b"new", None)]))
    store.apply(3, 1, put_batch("c", 3, [(b"never", None)]))
    store.flush()
    newest = store.live_blocks[-1]
    rows = decode_block(disk.read_file(_block_path(newest)), path="x")
    assert rows == [(b"old", None)]
    assert open_store(disk.crash()).scan() == []


def test_flush_of_only_noops_advances_flushed_opid_without_a_block() -> None:
    disk = new_tablet_disk()
    store = open_store(disk)
    store.apply_noop(1, 1)
    store.apply(2, 1, WriteBatch("c", 1, []))
    assert store.flush() == OpId(1, 2) and store.live_blocks == ()
    reopened = open_store(disk.crash())
    assert reopened.applied_index == 2 and reopened.client_result("c") is not None


def test_large_flush_is_split_into_bounded_blocks() -> None:
    disk = new_tablet_disk()
    store = open_store(disk, StoreOptions(max_block_bytes=400))
    rows = [(b"k%03d" % i, b"v" * 50) for i in range(20)]
    store.apply(1, 1, put_batch("c", 1, rows))
    store.flush()
    assert len(store.live_blocks) > 2
    for block_id in store.live_blocks:
        assert len(disk.read_file(_block_path(block_id))) < 400 + 64
    assert open_store(disk.crash()).scan() == rows
    with pytest.raises(ValueError):
        StoreOptions(max_block_bytes=0)


# ----------------------------------------------------------------------- compaction


def test_compaction_merges_blocks_and_deletes_the_old_files() -> None:
    disk = new_tablet_disk()
    store = open_store(disk, StoreOptions(max_live_blocks=3))
    model: dict[bytes, bytes] = {}
    for index in range(1, 6):
        rows: list[tuple[bytes, bytes | None]] = [(b"k%d" % index, b"v%d" % index)]
        if index > 2:
            rows.append((b"k%d" % (index - 2), None))
            del model[b"k%d" % (index - 2)]
        model[b"k%d" % index] = b"v%d" % index
        store.apply(index, 1, put_batch("c", index, rows))
        store.flush()
    old = store.live_blocks
    assert len(old) == 5 and store.needs_compaction()
    live = store.compact()
    assert len(live) == 1 and store.live_blocks == live and not store.needs_compaction()
    assert store.scan() == sorted(model.items())
    for block_id in old:
        assert not disk.exists(_block_path(block_id))
    superblock = _superblock(disk)
    assert superblock.live_blocks == live and superblock.orphaned_blocks == ()
    assert superblock.flushed_opid == OpId(1, 5)
    assert decode_block(disk.read_file(_block_path(live[0])), path="x") == sorted(model.items())
    assert open_store(disk.crash()).scan() == sorted(model.items())
    assert store.compact() == live  # one block: nothing to do


def test_compaction_is_not_needed_when_it_cannot_reduce_blocks() -> None:
    store = open_store(new_tablet_disk(), StoreOptions(max_live_blocks=1, max_block_bytes=100))
    store.apply(1, 1, put_batch("c", 1, [(b"k%d" % i, b"v" * 60) for i in range(4)]))
    store.flush()
    assert len(store.live_blocks) == 4
    assert not store.needs_compaction()


def test_replace_live_blocks_protocol() -> None:
    disk = new_tablet_disk()
    layout = ServerLayout(ROOT, disk)
    blocks = BlockManager(layout)
    ids = [blocks.flush([(b"k", b"%d" % i)]) for i in range(4)]
    metadata = MetadataStore(layout)
    superblock = attrs.evolve(_superblock(disk), live_blocks=tuple(ids))
    new = blocks.flush([(b"k", b"merged")])
    with pytest.raises(BlockProtocolError):
        replace_live_blocks(metadata, blocks, superblock, ["nope"], [new])
    with pytest.raises(BlockProtocolError):
        replace_live_blocks(metadata, blocks, superblock, ids[1:3], [ids[0]])
    final = replace_live_blocks(metadata, blocks, superblock, ids[1:3], [new])
    assert final.live_blocks == (ids[0], new, ids[3]) and final.orphaned_blocks == ()
    assert not blocks.exists(ids[1]) and not blocks.exists(ids[2]) and blocks.exists(new)


# ----------------------------------------------------------------------- bootstrap errors


def _flushed_store_disk() -> tuple[SimDisk, tuple[str, ...]]:
    disk = new_tablet_disk()
    store = open_store(disk)
    store.apply(1, 1, put_batch("c", 1, [(b"a", b"1")]))
    store.flush()
    store.apply(2, 1, put_batch("c", 2, [(b"b", b"2")]))
    store.flush()
    return disk, store.live_blocks


def test_corrupt_block_names_its_path() -> None:
    disk, live = _flushed_store_disk()
    path = _block_path(live[1])
    f = disk.open(path)
    data = f.pread(0, f.size())
    f.pwrite(len(data) - 1, bytes([data[-1] ^ 0x10]))
    f.close()
    with pytest.raises(TabletDataCorrupt) as exc:
        open_store(disk)
    assert exc.value.path == path and exc.value.block_id == live[1]
    assert "checksum mismatch" in exc.value.reason and path in str(exc.value)
    assert disk.exists(path), "evidence is never deleted"


def test_missing_block_names_its_path() -> None:
    disk, live = _flushed_store_disk()
    disk.unlink(_block_path(live[0]))
    with pytest.raises(TabletDataCorrupt, match="missing") as exc:
        open_store(disk)
    assert exc.value.path == _block_path(live[0])


def test_block_with_wrong_row_shape_is_corrupt() -> None:
    disk = new_tablet_disk()
    layout = ServerLayout(ROOT, disk)
    blocks = BlockManager(layout)
    cases: list[tuple[Any, str]] = [
        ([(1, "x")], "key is not"),
        ([(b"b", b"1"), (b"a", b"2")], "out of order"),
        ([(b"a",)], "fields"),
        ([(b"a", 5)], "value is not"),
    ]
    for rows, fragment in cases:
        block_id = blocks.flush(rows)
        MetadataStore(layout).write_superblock(
            Superblock(TABLET, DataState.READY, live_blocks=(block_id,))
        )
        with pytest.raises(TabletDataCorrupt, match=fragment) as exc:
            open_store(disk)
        assert exc.value.path == _block_path(block_id)


def test_corrupt_superblock_and_wrong_states() -> None:
    disk = new_tablet_disk()
    path = f"{ROOT}/tablet-meta/{TABLET}"
    f = disk.open(path)
    f.pwrite(20, b"\xff\xff")
    f.close()
    with pytest.raises(TabletDataCorrupt) as corrupt:
        open_store(disk)
    assert corrupt.value.path == path
    disk = new_tablet_disk()
    disk.unlink(path)
    with pytest.raises(TabletStateError, match="does not exist"):
        open_store(disk)
    for state in (DataState.DELETED, DataState.COPYING):
        with pytest.raises(TabletStateError, match=state.value):
            open_store(_state_disk(state))


def _state_disk(state: DataState) -> SimDisk:
    disk = new_tablet_disk()
    _metadata(disk).write_superblock(Superblock(TABLET, state))
    return disk


def test_inconsistent_client_table_is_corrupt() -> None:
    disk = new_tablet_disk()
    _metadata(disk).write_superblock(
        Superblock(
            TABLET,
            DataState.READY,
            flushed_opid=OpId(1, 3),
            client_results=(ClientResult("c", 1, 9, 1),),
        )
    )
    with pytest.raises(TabletDataCorrupt, match="above the flushed OpId"):
        open_store(disk)


def test_open_finishes_an_interrupted_deletion() -> None:
    disk, live = _flushed_store_disk()
    superblock = _superblock(disk)
    _metadata(disk).write_superblock(
        attrs.evolve(superblock, live_blocks=live[1:], orphaned_blocks=live[:1])
    )
    store = open_store(disk)
    assert not disk.exists(_block_path(live[0]))
    assert _superblock(disk).orphaned_blocks == () and store.live_blocks == live[1:]


def test_old_superblock_without_tablet_fields_decodes() -> None:
    # A superblock written before flushed_opid / client_results existed.
    old: dict[str, object] = {
        "tablet_id": TABLET,
        "data_state": "READY",
        "tombstone_last_opid": None,
        "quarantine_dir": None,
        "live_blocks": [],
        "orphaned_blocks": [],
        "table_name": "",
        "schema": [],
    }
    from revivify.impl.storage.codec import encode_frame
    from revivify.impl.storage.metadata import FORMAT_VERSION, SUPERBLOCK_MAGIC

    data = encode_frame(SUPERBLOCK_MAGIC, FORMAT_VERSION, msgspec.msgpack.encode(old))
    superblock = decode_superblock(data, path="p")
    assert superblock == Superblock(TABLET, DataState.READY)
    full = Superblock(
        TABLET,
        DataState.READY,
        flushed_opid=OpId(2, 9),
        client_results=(ClientResult("c", 3, 9, 1, "bad"),),
    )
    assert decode_superblock(encode_superblock(full), path="p") == full


# ----------------------------------------------------------------------- failure, concurrency


def test_superblock_changed_underneath_fails_the_store() -> None:
    disk = new_tablet_disk()
    store = open_store(disk)
    store.apply(1, 1, put_batch("c", 1, [(b"a", b"1")]))
    _metadata(disk).write_superblock(Superblock(TABLET, DataState.DELETED))
    with pytest.raises(TabletStateError, match="DELETED"):
        store.flush()
    assert store.get(b"a") == b"1", "reads keep working"
    with pytest.raises(TabletStoreFailed):
        store.apply(2, 1, put_batch("c", 2, [(b"b", b"2")]))
    with pytest.raises(TabletStoreFailed):
        store.flush()
    assert _superblock(disk).data_state is DataState.DELETED, "never changes data_state"


def test_io_error_during_flush_is_wrapped_and_fails_the_store() -> None:
    disk = new_tablet_disk()
    store = open_store(disk)
    store.apply(1, 1, put_batch("c", 1, [(b"a", b"1")]))
    disk.crash_after(2)
    with pytest.raises(TabletStoreFailed) as exc:
        store.flush()
    assert store.failure is exc.value.cause
    with pytest.raises(TabletStoreFailed):
        store.compact()
    assert not store.needs_compaction()


class _HookedDisk:
    """A Disk forwarding to a SimDisk that calls `hook` once, at the first rename into data/
    (the block write of a flush)."""

    def __init__(self, inner: SimDisk) -> None:
        self.inner = inner
        self.hook: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def rename(self, src: str, dst: str) -> None:
        hook, self.hook = self.hook, None
        if hook is not None and dst.startswith(f"{ROOT}/data/"):
            hook()
        self.inner.rename(src, dst)


def test_applies_and_reads_proceed_during_a_flush() -> None:
    inner = new_tablet_disk()
    disk = _HookedDisk(inner)
    layout = ServerLayout(ROOT, disk)  # type: ignore[arg-type]
    store = TabletStore.open(layout, MetadataStore(layout), BlockManager(layout), TABLET)
    store.apply(1, 1, put_batch("c", 1, [(b"a", b"1"), (b"b", b"1")]))
    seen: list[object] = []

    def during_flush() -> None:
        seen.append(store.scan())
        seen.append(store.apply(2, 1, put_batch("c", 2, [(b"a", None), (b"c", b"2")])))
        seen.append(store.scan())
        seen.append(store.memory_bytes > 0)

    disk.hook = during_flush
    assert store.flush() == OpId(1, 1)
    assert seen == [
        [(b"a", b"1"), (b"b", b"1")],
        ApplyResult(2, 2),
        [(b"b", b"1"), (b"c", b"2")],
        True,
    ]
    assert store.scan() == [(b"b", b"1"), (b"c", b"2")]
    assert store.applied_index == 2 and store.flushed_index == 1
    assert open_store(inner.crash()).scan() == [(b"a", b"1"), (b"b", b"1")]
    assert store.flush() == OpId(1, 2)
    assert open_store(inner.crash()).scan() == [(b"b", b"1"), (b"c", b"2")]


def test_open_on_the_real_disk(tmp_path: object) -> None:
    from revivify.impl.storage.disk import OsDisk

    root = str(tmp_path)
    layout = ServerLayout(root, OsDisk())
    layout.format("server-1", 1)
    metadata = MetadataStore(layout)
    metadata.write_superblock(Superblock(TABLET, DataState.READY))
    store = TabletStore.open(layout, metadata, BlockManager(layout), TABLET)
    store.apply(1, 1, put_batch("c", 1, [(b"k", b"v")]))
    store.flush()
    again = TabletStore.open(layout, metadata, BlockManager(layout), TABLET)
    assert again.scan() == [(b"k", b"v")] and again.applied_index == 1
