"""A tablet's columns: the one schema type the master's catalog and the tablet servers share.

A table's schema is a list of `Column`s. The master keeps it in the table's catalog row
(impl/master/catalog.py ``TableRecord.schema``) and sends it with ``Admin.AlterSchema``
(impl/tserver/master_api.py); a tablet server records it per tablet
(impl/tserver/schema.py ``SchemaRecord``). It lives here, in the tablet's data layer, because
both of those layers stand on this one: the master embeds a tablet server, so a type the
tablet server needs cannot live in the master without an import cycle.

Wire and disk form: a msgspec Struct without a tag, encoded as a msgpack map of its fields;
the name of the module that defines it is not part of the bytes, and new fields are only
ever added with defaults (catalog rows and schema files written before stay readable).
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

ColumnType = Literal["binary", "string", "int64", "double", "bool"]
COLUMN_TYPES: Final[tuple[ColumnType, ...]] = ("binary", "string", "int64", "double", "bool")


class Column(msgspec.Struct, frozen=True):
    """One column. The first column is the row key (``key=True``), and only the first:
    tablets are hash-partitioned on it (impl/master/catalog.py `hash_bucket`)."""

    name: str
    type: ColumnType = "binary"
    key: bool = False


__all__ = ["COLUMN_TYPES", "Column", "ColumnType"]
