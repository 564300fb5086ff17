"""``DIR/cluster.json``: what ``revivify cluster start`` ran, for every later command.

One JSON document, replaced atomically (written to a temporary file, fsync'd, renamed over
the old one, the directory fsync'd) each time a cluster command changes it, so a reader
never sees half a file and a crash leaves the old one or the new one:

    {"version": 1, "master_args": [...], "tserver_args": [...],
     "masters":  [{"name": "m0", "uuid", "address", "port", "pid", "start_ticks",
                   "fs_root", "log", "web_port", "web"}, ...],
     "tservers": [{"name": "ts0", ...}, ...],
     "follower": null | {"web_port", "web", "pid", "start_ticks", "log"}}

``pid`` and ``start_ticks`` name the process last started for that server (the pair stays
true after the pid is reused: impl/processes/control.py pid_alive); ``uuid`` is empty until
the server said its "listening" line; ``web`` (HOST:PORT of its status pages) until it said
its web line, and ``web_port`` is the port it was told to serve them on (files written
before the pages had neither: 0 and "", any free port on the next start). Commands that
talk to the cluster read the master addresses from it (``--root DIR`` in place of
``--masters``): a missing or malformed file is a `ClusterFileError` naming the file and what
was wrong (exit 2).

Cluster commands that change the file hold ``DIR/cluster.lock`` (an exclusive flock) from
reading it to writing it back, so two of them never interleave.

``follower`` is the trace follower ``cluster start --watch`` runs beside the servers
(``revivify trace follow DIR/traces --web 127.0.0.1:WEB_PORT``): its port is chosen once
and kept, like a server's, since the masters are told its address (``--trace-follower``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
from collections.abc import Iterator
from typing import Any

FILE_NAME = "cluster.json"
LOCK_NAME = "cluster.lock"
VERSION = 1


class ClusterFileError(Exception):
    """DIR/cluster.json is missing or malformed: the one line to print."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what


# Values (frozen dataclasses: msgspec encodes and decodes them as it did the Structs they
# were). Every annotation below must be one `_typed` knows: str, int, list[X], X | None and
# these records (tests/cluster_cli/test_cluster_records.py tries them all).


@dataclasses.dataclass(frozen=True, slots=True)
class ServerRecord:
    name: str
    address: str
    port: int
    fs_root: str
    log: str
    uuid: str = ""
    pid: int = 0
    start_ticks: int = 0
    web_port: int = 0
    web: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class FollowerRecord:
    web_port: int
    log: str
    web: str = ""
    pid: int = 0
    start_ticks: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterRecord:
    version: int
    masters: list[ServerRecord]
    tservers: list[ServerRecord]
    master_args: list[str] = dataclasses.field(default_factory=list)
    tserver_args: list[str] = dataclasses.field(default_factory=list)
    follower: FollowerRecord | None = None


# Reading the file: two readers, one verdict. ``revivify cluster status`` reads this file
# and nothing else, and msgspec costs a sixth of its start-up budget (issue 31: 80 ms), so
# a file is first read with the standard library's json (`_read_plainly`), which takes it
# only when every field it holds has exactly the type its annotation names (an int that is
# an int, not a bool or 7051.0) and no required field is missing. Anything else, and
# anything the two parsers might judge differently (NaN, a byte order mark, not UTF-8),
# goes to msgspec, whose verdict and words are the reference: the fast reader never
# accepts a file msgspec refuses, and never returns a different record (a Hypothesis test
# compares them), so the errors a malformed file gets are msgspec's, as before.


class _Unsure(Exception):
    """The plain reader will not judge this document: msgspec will."""


def _refuse_constant(name: str) -> Any:
    raise _Unsure(name)  # NaN, Infinity: Python's json reads them, JSON has none


def _read_plainly(data: bytes) -> ClusterRecord | None:
    """The record in `data` if the standard library's reading is certain of it, else None."""
    try:
        document = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
        record = _typed("ClusterRecord", document)
    except (_Unsure, ValueError, RecursionError):
        return None
    assert isinstance(record, ClusterRecord)
    return record


def _typed(annotation: str, value: Any) -> Any:
    """`value` (from json.loads) as the annotation names it; _Unsure if it is not exactly
    that. The annotations are strings (``from __future__ import annotations``)."""
    annotation = annotation.strip()
    if annotation.endswith(" | None"):
        return None if value is None else _typed(annotation[:-len(" | None")], value)
    if annotation.startswith("list[") and annotation.endswith("]"):
        if type(value) is not list:
            raise _Unsure(annotation)
        return [_typed(annotation[5:-1], item) for item in value]
    plain = {"str": str, "int": int}.get(annotation)
    if plain is not None:
        if type(value) is not plain:  # type(), not isinstance: True is no int to msgspec
            raise _Unsure(annotation)
        return value
    cls = _RECORDS[annotation]  # KeyError: an annotation added that this reader lacks
    if type(value) is not dict:
        raise _Unsure(annotation)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name in value:
            fields[field.name] = _typed(str(field.type), value[field.name])
        elif (field.default is dataclasses.MISSING
              and field.default_factory is dataclasses.MISSING):
            raise _Unsure(field.name)  # missing: msgspec names it
    return cls(**fields)


_RECORDS: dict[str, type] = {cls.__name__: cls
                             for cls in (ClusterRecord, ServerRecord, FollowerRecord)}


def _read_strictly(data: bytes, path: str) -> ClusterRecord:
    """msgspec's reading of `data`: the record, or ClusterFileError in msgspec's words."""
    import msgspec

    try:
        return msgspec.json.decode(data, type=ClusterRecord)
    except msgspec.ValidationError as exc:
        raise ClusterFileError(path, f"not a cluster file: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ClusterFileError(path, f"not valid JSON: {exc}") from None


def path_of(root: str) -> str:
    return os.path.join(root, FILE_NAME)


def load(root: str) -> ClusterRecord:
    """The record in ``root/cluster.json`` (ClusterFileError if missing or malformed)."""
    path = path_of(root)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        what = ("no such file (start a cluster there with 'revivify cluster start --root "
                f"{root}')") if os.path.isdir(root) else f"no such file ({root} is not a "\
            "directory)"
        raise ClusterFileError(path, what) from None
    except OSError as exc:
        raise ClusterFileError(path, exc.strerror or str(exc)) from None
    record = _read_plainly(data) or _read_strictly(data, path)
    if record.version != VERSION:
        raise ClusterFileError(path, f"version {record.version}, expected {VERSION}")
    if not record.masters:
        raise ClusterFileError(path, "no masters listed")
    return record


def master_addresses(root: str) -> list[str]:
    """The masters' addresses of the cluster in `root` (ClusterFileError)."""
    return [m.address for m in load(root).masters]


def save(root: str, record: ClusterRecord) -> None:
    """Replace ``root/cluster.json`` atomically and durably."""
    import msgspec  # the commands that write the file run servers: msgspec is loaded

    path = path_of(root)
    tmp = f"{path}.tmp.{os.getpid()}"
    data = msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextlib.contextmanager
def locked(root: str) -> Iterator[None]:
    """Hold ``root/cluster.lock`` (blocking until another cluster command lets go)."""
    fd = os.open(os.path.join(root, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


__all__ = ["FILE_NAME", "ClusterFileError", "ClusterRecord", "FollowerRecord", "ServerRecord",
           "load",
           "locked", "master_addresses", "path_of", "save"]
