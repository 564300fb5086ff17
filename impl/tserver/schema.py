"""A tablet's schema version on a tablet server: ``Admin.AlterSchema``, durable per tablet.

Seed 004 appendix B ("Altering a table"): the master bumps a table's schema version in the
catalog, then sends AlterTablet to each tablet; a tablet reports the version it has in its
heartbeats, and the master keeps the table ALTERING until every tablet reports the new one
(impl/master/reports.py), re-sending an idempotent alter to a tablet that reports an old one.
This module is the tablet server's half:

    Admin.AlterSchema(tablet_id, schema_version, schema)  -> Ack
        a RUNNING replica of the tablet (not an internal one: the catalog) records the
        version and schema durably if it is newer than what it has; an older or equal
        version is ignored (idempotent: the master may send it on every report)

Where it is kept, and why not in the superblock. The superblock (storage/values.py) has
``table_name`` and ``schema`` placeholders, but it is written by the tablet manager's
lifecycle steps (create, delete, copy: impl/tserver/manager) and by every flush (the
replica driver), each from its own copy of it; a third writer would have to join their
step lock or lose updates. So the version lives in a small file of its own per tablet,
``<fs_root>/tablet-schema/<tablet_id>``: one codec frame (magic b"RVSV", version 1, CRC
checked like every metadata file) holding a `SchemaRecord`, replaced atomically (temp,
fsync, rename, fsync dir: storage/disk.py atomic_replace). After a crash the file holds
the old record or the new one, never a mix; a server without the directory (formatted
before this existed) simply has no versions yet: the format of every other file is
unchanged, so old directories open as before (``tserver wipe`` removes the directory with
the rest: storage/offline.py).

What a version means. The record is made on the replica the master sends the alter to (the
tablet's leader as the catalog records it), not replicated through the tablet's Raft log:
the tablet store is a key-value store that does not read the schema, and the catalog
records the highest version any replica reported (``reported_schema_version``), which is
what ALTERING waits for. A follower, or a replica made by tablet copy, reports the version
it has (0 if none); a replica whose tablet was deleted keeps a stale file, ignored: only
hosted tablets are reported. Replicating the alter as a tablet op is for when the data
store enforces a schema.
"""

from __future__ import annotations

import posixpath
import threading
from typing import Final, Protocol

import msgspec

from revivify.impl.rpc import CallContext, Service
from revivify.impl.storage.codec import decode_whole, encode_value
from revivify.impl.storage.disk import Disk, atomic_replace, mkdir_durably
from revivify.impl.storage.errors import CorruptRecord, MetadataCorrupt
from revivify.impl.storage.layout import TABLET_SCHEMA, ServerLayout, validate_name
from revivify.impl.tablet.columns import Column

from . import api
from .master_api import ADMIN_ALTER_SCHEMA, AlterSchema

SCHEMA_DIR: Final = TABLET_SCHEMA
SCHEMA_MAGIC: Final = b"RVSV"
SCHEMA_FORMAT: Final = 1


class SchemaRecord(msgspec.Struct, frozen=True):
    """What one tablet's schema file holds."""

    tablet_id: str
    schema_version: int
    schema: tuple[Column, ...]


class SchemaVersions:
    """Every tablet's recorded schema version on one server (module docstring). Reads are
    served from memory after the first; a write goes to disk first, then to memory."""

    def __init__(self, layout: ServerLayout, disk: Disk) -> None:
        self.layout = layout
        self.disk = disk
        self.directory = posixpath.join(layout.root, SCHEMA_DIR)
        self._cache: dict[str, SchemaRecord | None] = {}
        # The blocking half runs in worker threads: one writer at a time, so a lower
        # version can never overwrite a higher one between the check and the rename.
        self._lock = threading.Lock()

    def path(self, tablet_id: str) -> str:
        return posixpath.join(self.directory, validate_name(tablet_id))

    def load(self, tablet_id: str) -> SchemaRecord | None:
        """The tablet's record, or None (never altered here). Blocking on a cache miss."""
        if tablet_id in self._cache:
            return self._cache[tablet_id]
        path = self.path(tablet_id)
        record: SchemaRecord | None = None
        if self.disk.exists(path):
            data = self.disk.read_file(path)
            try:
                record = decode_whole(data, SchemaRecord, path=path, magic=SCHEMA_MAGIC)
            except CorruptRecord as exc:
                raise MetadataCorrupt(path, exc.offset, exc.reason, exc.kind) from None
            if record.tablet_id != tablet_id:
                raise MetadataCorrupt(path, 0, f"holds tablet {record.tablet_id}")
        self._cache[tablet_id] = record
        return record

    def cached_version(self, tablet_id: str) -> int | None:
        """The version known in memory without touching the disk (heartbeats: they run on
        the event loop); None when never loaded or never altered."""
        record = self._cache.get(tablet_id)
        return record.schema_version if record is not None else None

    def record(self, alter: AlterSchema) -> bool:
        """Make ``alter`` durable if it is newer than the tablet's record; whether it was.
        Blocking (run it in a worker thread)."""
        assert alter.schema_version >= 0, "schema versions start at 0"
        with self._lock:
            current = self.load(alter.tablet_id)
            if current is not None and current.schema_version >= alter.schema_version:
                return False  # idempotent: an old or repeated alter changes nothing
            mkdir_durably(self.disk, self.directory)
            new = SchemaRecord(alter.tablet_id, alter.schema_version, tuple(alter.schema))
            atomic_replace(self.disk, self.path(alter.tablet_id),
                           encode_value(SCHEMA_MAGIC, SCHEMA_FORMAT, new))
            self._cache[alter.tablet_id] = new  # only once durable
            return True

    def warm(self, tablet_ids: list[str]) -> None:
        """Load the records of ``tablet_ids`` into memory (blocking; at startup)."""
        for tablet_id in tablet_ids:
            try:
                self.load(tablet_id)
            except (MetadataCorrupt, OSError, ValueError):
                self._cache[tablet_id] = None  # reported as never altered; re-sent


class AlterHost(Protocol):
    """What the handler needs of the tablet server (a Protocol: no import of server.py)."""

    schemas: SchemaVersions

    def _refuse_internal(self, tablet_id: str) -> None: ...

    def _replica(self, tablet_id: str) -> object: ...

    async def blocking(self, fn: object, *args: object) -> object: ...


def register_alter_schema(service: Service, host: AlterHost) -> None:
    """``Admin.AlterSchema`` on the tablet server's service (module docstring)."""

    async def on_alter_schema(req: AlterSchema, ctx: CallContext) -> api.Ack:
        host._refuse_internal(req.tablet_id)
        if req.schema_version < 0:
            raise api.InvalidArgument(f"schema version {req.schema_version} is negative")
        host._replica(req.tablet_id)  # hosted and RUNNING, else the usual typed refusal
        await host.blocking(host.schemas.record, req)
        return api.Ack()

    service.register(ADMIN_ALTER_SCHEMA, AlterSchema, api.Ack, on_alter_schema)


__all__ = ["SCHEMA_DIR", "AlterHost", "SchemaRecord", "SchemaVersions",
           "register_alter_schema"]
