"""impl/tserver/schema.py: a tablet's schema version, durable in a file of its own."""

from __future__ import annotations

import os

import pytest

from revivify.impl.storage.disk import OsDisk
from revivify.impl.storage.errors import MetadataCorrupt
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.master_api import AlterSchema
from revivify.impl.tserver.schema import SCHEMA_DIR, SchemaVersions

SCHEMA = [Column("key", key=True), Column("v")]


def versions(root: str) -> SchemaVersions:
    disk = OsDisk()
    layout = ServerLayout(root, disk)
    layout.format("a" * 32, 0)
    return SchemaVersions(layout, disk)


def reopen(root: str) -> SchemaVersions:
    disk = OsDisk()
    return SchemaVersions(ServerLayout(root, disk), disk)


class TestSchemaVersions:
    def test_never_altered(self, tmp_path: pytest.TempPathFactory) -> None:
        """A tablet never altered has no record, and no file or directory is made."""
        s = versions(str(tmp_path))
        assert s.load("t1") is None and s.cached_version("t1") is None
        assert not os.path.exists(os.path.join(str(tmp_path), SCHEMA_DIR))

    def test_newer_only_and_durable(self, tmp_path: pytest.TempPathFactory) -> None:
        """A newer version is recorded and survives a reopen; an old or equal one is
        ignored (the master's alter is idempotent)."""
        s = versions(str(tmp_path))
        assert s.record(AlterSchema("t1", 2, SCHEMA))
        assert not s.record(AlterSchema("t1", 2, SCHEMA))
        assert not s.record(AlterSchema("t1", 1, SCHEMA[:1]))
        assert s.cached_version("t1") == 2
        again = reopen(str(tmp_path))
        assert again.cached_version("t1") is None  # nothing read yet
        again.warm(["t1", "t2"])
        assert again.cached_version("t1") == 2 and again.cached_version("t2") is None
        record = again.load("t1")
        assert record is not None and list(record.schema) == SCHEMA
        assert again.record(AlterSchema("t1", 3, SCHEMA))
        assert reopen(str(tmp_path)).load("t1").schema_version == 3  # type: ignore[union-attr]

    def test_corrupt_file_refused(self, tmp_path: pytest.TempPathFactory) -> None:
        """A file that does not verify is MetadataCorrupt on load; warm() reports the
        tablet as never altered (the master sends the alter again)."""
        s = versions(str(tmp_path))
        s.record(AlterSchema("t1", 1, SCHEMA))
        path = s.path("t1")
        with open(path, "r+b") as f:
            f.seek(10)
            f.write(b"\xff\xff")
        with pytest.raises(MetadataCorrupt):
            reopen(str(tmp_path)).load("t1")
        warmed = reopen(str(tmp_path))
        warmed.warm(["t1"])
        assert warmed.cached_version("t1") is None

    def test_wipe_removes_them(self, tmp_path: pytest.TempPathFactory) -> None:
        """``tserver wipe`` counts the schema directory as the server's own and removes
        it: a new identity does not inherit the old one's versions."""
        from revivify.impl.storage.offline import check_wipe, wipe_directory

        s = versions(str(tmp_path))
        s.record(AlterSchema("t1", 1, SCHEMA))
        check = check_wipe(s.layout)
        assert SCHEMA_DIR in check.to_remove and not check.unknown
        wipe_directory(s.layout, check)
        assert not os.path.exists(os.path.join(str(tmp_path), SCHEMA_DIR))
