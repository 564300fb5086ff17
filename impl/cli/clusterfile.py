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
import fcntl
import os
from collections.abc import Iterator

import msgspec

FILE_NAME = "cluster.json"
LOCK_NAME = "cluster.lock"
VERSION = 1


class ClusterFileError(Exception):
    """DIR/cluster.json is missing or malformed: the one line to print."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what


class ServerRecord(msgspec.Struct):
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


class FollowerRecord(msgspec.Struct):
    web_port: int
    log: str
    web: str = ""
    pid: int = 0
    start_ticks: int = 0


class ClusterRecord(msgspec.Struct):
    version: int
    masters: list[ServerRecord]
    tservers: list[ServerRecord]
    master_args: list[str] = []
    tserver_args: list[str] = []
    follower: FollowerRecord | None = None


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
    try:
        record = msgspec.json.decode(data, type=ClusterRecord)
    except msgspec.ValidationError as exc:
        raise ClusterFileError(path, f"not a cluster file: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ClusterFileError(path, f"not valid JSON: {exc}") from None
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
