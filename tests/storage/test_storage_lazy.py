"""LazyDisk (impl/storage/lazy.py): reads see every write at once; the operating system (what
a power loss keeps) sees exactly what was synced."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revivify.impl.storage.disk import OsDisk, atomic_replace
from revivify.impl.storage.lazy import LazyDisk

# An operation on one file: ("w", offset, data), ("t", size), ("f", offset, length),
# ("sync",), ("reopen",).
OPS = st.lists(st.one_of(
    st.tuples(st.just("w"), st.integers(0, 64), st.binary(min_size=1, max_size=24)),
    st.tuples(st.just("t"), st.integers(0, 80)),
    st.tuples(st.just("f"), st.integers(0, 64), st.integers(1, 24)),
    st.tuples(st.just("sync")),
    st.tuples(st.just("reopen")),
), max_size=30)


def _apply(model: bytearray, op: tuple) -> None:  # type: ignore[type-arg]
    """What POSIX says the operation does to the file's bytes."""
    if op[0] == "w":
        _, off, data = op
        if len(model) < off + len(data):
            model.extend(bytes(off + len(data) - len(model)))
        model[off: off + len(data)] = data
    elif op[0] == "t":
        del model[op[1]:]
        model.extend(bytes(op[1] - len(model)))
    elif op[0] == "f":
        end = op[1] + op[2]
        model.extend(bytes(max(0, end - len(model))))


@settings(max_examples=150, deadline=None)
@given(ops=OPS, window=st.tuples(st.integers(0, 90), st.integers(0, 40)))
def test_reads_see_writes_and_the_os_sees_only_what_was_synced(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple], window: tuple[int, int]  # type: ignore[type-arg]
) -> None:
    path = str(tmp_path_factory.mktemp("lazy") / "f")
    disk = LazyDisk(OsDisk())
    f = disk.open(path, create=True)
    live, durable = bytearray(), bytearray()
    for op in ops:
        if op[0] == "sync":
            f.fdatasync()
            durable = bytearray(live)
        elif op[0] == "reopen":
            f.close()
            f = disk.open(path)
        else:
            if op[0] == "w":
                f.pwrite(op[1], op[2])
            elif op[0] == "t":
                f.truncate(op[1])
            else:
                f.fallocate(op[1], op[2])
            _apply(live, op)
        assert f.size() == len(live) == disk.file_size(path)
    offset, length = window
    assert f.pread(offset, length) == bytes(live[offset: offset + length])
    assert disk.read_file(path) == bytes(live)
    assert bytes(disk.map_file(path)) == bytes(live)
    f.close()
    # The power loss: the process's recorded operations are gone; the OS holds the synced.
    assert OsDisk().read_file(path) == bytes(durable)


def test_rename_carries_unsynced_writes_and_unlink_drops_them(tmp_path: Path) -> None:
    disk = LazyDisk(OsDisk())
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    f = disk.open(a, create=True)
    f.pwrite(0, b"hello")
    f.close()
    assert disk.unsynced_bytes() == 5
    disk.rename(a, b)
    assert disk.read_file(b) == b"hello"
    assert OsDisk().read_file(b) == b""  # the name moved at once, the contents did not
    disk.unlink(b)
    assert disk.unsynced_bytes() == 0 and not os.path.exists(b)


def test_atomic_replace_is_durable_on_the_lazy_disk(tmp_path: Path) -> None:
    """The storage's one correct way to replace a file survives a power loss."""
    disk = LazyDisk(OsDisk())
    target = str(tmp_path / "meta")
    atomic_replace(disk, target, b"v1")
    atomic_replace(disk, target, b"v2")
    assert disk.unsynced_bytes() == 0
    assert OsDisk().read_file(target) == b"v2"


def test_a_write_without_fsync_is_lost_when_the_process_is_killed(tmp_path: Path) -> None:
    """The power loss end to end: a process on os_disk() with REVIVIFY_LAZY_DISK=1 writes
    two files, syncs one, and is killed (SIGKILL): the synced one survives, the other is
    empty. Without the variable the kernel keeps both (kill -9 alone is no power loss)."""
    script = (
        "import os, signal\n"
        "from revivify.impl.storage.faults import os_disk\n"
        "d = os_disk()\n"
        f"s = d.open({str(tmp_path / 'synced')!r}, create=True)\n"
        "s.pwrite(0, b'kept'); s.fsync()\n"
        f"u = d.open({str(tmp_path / 'unsynced')!r}, create=True)\n"
        "u.pwrite(0, b'lost')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    for lazy, expect in (("1", b""), ("", b"lost")):
        env = {**os.environ, "REVIVIFY_LAZY_DISK": lazy}
        done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60)
        assert done.returncode == -9
        assert (tmp_path / "synced").read_bytes() == b"kept"
        assert (tmp_path / "unsynced").read_bytes() == expect
