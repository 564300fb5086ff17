"""Catalog rows and the snapshot: encoding, refusal of bad rows, rebuild from rows alone, and
the rows living in a real TabletStore (the catalog is a tablet)."""

from __future__ import annotations

import msgspec
import pytest
from master_helpers import create, ok, process, replica, run, table, tablets

from revivify.impl.master.catalog import (
    FORMAT,
    Catalog,
    CatalogWrite,
    TableState,
    decode_row,
    encode_record,
    hash_bucket,
    record_key,
    table_key,
    tablet_key,
)
from revivify.impl.master.errors import CatalogCorrupt
from revivify.impl.master.operations import plan_delete_table
from revivify.impl.storage.blocks import BlockManager
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.storage.values import DataState, Superblock
from revivify.impl.tablet.store import TabletStore
from revivify.impl.testing.simdisk import SimDisk


def sample() -> Catalog:
    catalog, _, _ = create(Catalog())
    catalog, _, _ = process(catalog, "ts-1", replica(tablets(catalog)[0], term=1))
    catalog, _, _ = create(catalog, "gone", request_id="r2", seed=1)
    catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "gone")))
    return catalog


class TestRows:
    def test_every_record_round_trips(self) -> None:
        catalog = sample()
        for record in catalog.records():
            key = record_key(record)
            assert decode_row(key, encode_record(record)) == record

    def test_keys(self) -> None:
        assert table_key("ab") == b"table/ab" and tablet_key("cd") == b"tablet/cd"

    @pytest.mark.parametrize(("key", "value", "fragment"), [
        (b"other/x", b"\x80", "not a catalog key"),
        (b"table/x", b"garbage", "does not decode"),
        (b"tablet/x", b"\x80", "does not decode"),
    ])
    def test_bad_rows_are_refused_naming_the_key(self, key: bytes, value: bytes,
                                                 fragment: str) -> None:
        with pytest.raises(CatalogCorrupt, match=fragment) as info:
            decode_row(key, value)
        assert info.value.key == key

    def test_a_row_under_another_records_key_or_from_a_newer_format(self) -> None:
        record = table(sample())
        with pytest.raises(CatalogCorrupt, match="holds the record"):
            decode_row(table_key("elsewhere"), encode_record(record))
        newer = msgspec.structs.replace(record, format=FORMAT + 1)
        with pytest.raises(CatalogCorrupt, match="newer"):
            decode_row(record_key(newer), encode_record(newer))

    def test_hash_bucket_is_stable_and_in_range(self) -> None:
        assert hash_bucket(b"row-1", 8) == hash_bucket(b"row-1", 8)
        buckets = {hash_bucket(f"k{i}".encode(), 4) for i in range(200)}
        assert buckets == {0, 1, 2, 3}


class TestSnapshot:
    def test_rebuilt_from_rows_alone_it_is_the_same(self) -> None:
        catalog = sample()
        assert Catalog.from_rows(catalog.rows()) == catalog
        assert Catalog.from_rows(reversed(catalog.rows())) == catalog

    def test_deleted_records_are_kept_and_names_free(self) -> None:
        catalog = sample()
        assert len(catalog.tables) == 2 and catalog.table_by_name("gone") is None
        assert {t.state for t in catalog.tables.values()} == {TableState.RUNNING,
                                                               TableState.REMOVED}
        assert set(catalog.names) == {"t"}

    def test_apply_ops_mirrors_the_rows(self) -> None:
        catalog = sample()
        write = CatalogWrite(tablets=tuple(catalog.tablets.values()),
                             tables=tuple(catalog.tables.values()))
        assert Catalog().apply_ops(write.ops()) == catalog
        assert [op.key.split(b"/")[0] for op in write.ops()][-1] == b"table"
        dropped = catalog.apply_ops([msgspec.structs.replace(write.ops()[0], kind="delete",
                                                             value=b"")])
        assert len(dropped.tablets) == len(catalog.tablets) - 1

    def test_two_live_tables_with_one_name_are_corrupt(self) -> None:
        catalog = sample()
        twin = msgspec.structs.replace(table(catalog), table_id="f" * 32)
        with pytest.raises(CatalogCorrupt, match="also held"):
            catalog.apply(CatalogWrite(tables=(twin,)))

    def test_check_finds_a_missing_bucket_and_a_tablet_without_table(self) -> None:
        catalog = sample()
        catalog.check()
        first = tablets(catalog)[0]
        moved = msgspec.structs.replace(first, partition=7)
        with pytest.raises(CatalogCorrupt, match="buckets"):
            catalog.apply(CatalogWrite(tablets=(moved,))).check()
        stray = msgspec.structs.replace(first, tablet_id="e" * 32, table_id="nope")
        with pytest.raises(CatalogCorrupt, match="no record"):
            catalog.apply(CatalogWrite(tablets=(stray,))).check()


class TestInATabletStore:
    def test_the_writes_applied_by_the_store_rebuild_the_same_snapshot(self) -> None:
        """Each plan's write is one WriteBatch applied by the catalog tablet's store; after
        a flush and a reopen (a restarted master), the rows alone rebuild the snapshot."""
        disk = SimDisk()
        layout = ServerLayout("/srv", disk)
        layout.format("master-1", 1_700_000_000_000_000_000)
        metadata = MetadataStore(layout)
        metadata.write_superblock(Superblock("catalog", DataState.READY))

        def store() -> TabletStore:
            return TabletStore.open(layout, metadata, BlockManager(layout), "catalog")

        tablet_store = store()
        catalog = Catalog()
        seq = 0

        def commit_write(before: Catalog, write: CatalogWrite) -> Catalog:
            nonlocal seq
            seq += 1
            result = tablet_store.apply(seq, 1, write.to_batch("master-1/1", seq))
            assert not result.rejected
            return before.apply_ops(write.ops())

        steps = [
            lambda c: create(c)[0],
            lambda c: process(c, "ts-1", replica(tablets(c)[0], term=1))[0],
            lambda c: run(c, ok(plan_delete_table(c, "t")))[0],
        ]
        for step in steps:
            after = step(catalog)
            write = CatalogWrite(
                tablets=tuple(t for i, t in after.tablets.items() if catalog.tablets.get(i) != t),
                tables=tuple(t for i, t in after.tables.items() if catalog.tables.get(i) != t))
            catalog = commit_write(catalog, write)
            assert catalog == after
            assert Catalog.from_rows(tablet_store.scan(limit=None)) == catalog
        tablet_store.flush()
        assert Catalog.from_rows(store().scan(limit=None)) == catalog
