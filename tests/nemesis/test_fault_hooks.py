"""The test-only fault hooks (impl/faultfile.py, impl/rpc/faults.py, impl/storage/faults.py):
off without the environment variable, a cut drops frames at both ends, disk faults fail the
chosen operations under the chosen prefix, and a lifted fault is noticed."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import msgspec
import pytest
import trio

from revivify.impl import faultfile
from revivify.impl.faultfile import (
    ENV,
    FaultClock,
    FaultFile,
    clock_for_this_process,
    from_environment,
    parse_faults,
)
from revivify.impl.rpc import CallContext, Service, open_rpc_client, serve_rpc
from revivify.impl.storage.disk import OsDisk, atomic_replace
from revivify.impl.storage.faults import FaultyDisk, os_disk


class Ping(msgspec.Struct):
    n: int


def write_faults(path: Path, doc: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


class TestFaultFile:
    def test_off_without_the_variable(self) -> None:
        """No variable, no fault file; the real process starts with none."""
        assert from_environment({}) is None
        assert ENV not in os.environ or faultfile.ACTIVE is not None
        assert isinstance(os_disk(), OsDisk) or faultfile.ACTIVE is not None

    def test_parse(self) -> None:
        """Cuts are symmetric; disk faults carry their errno."""
        f = parse_faults(json.dumps({"cuts": [["a", "b"]], "disk": [
            {"prefix": "/x/", "op": "fsync", "errno": "EIO"},
            {"prefix": "/y/", "op": "write", "errno": "ENOSPC"}]}))
        assert f.cut("a", "b") and f.cut("b", "a") and not f.cut("a", "c")
        err = f.disk_error("fsync", "/x/wal")
        assert err is not None and err.errno == errno.EIO
        err = f.disk_error("write", "/y/z")
        assert err is not None and err.errno == errno.ENOSPC
        assert f.disk_error("write", "/x/wal") is None

    @pytest.mark.parametrize("text", ['[]', '{"cuts": [["a"]]}',
                                      '{"disk": [{"prefix": "rel", "op": "fsync"}]}',
                                      '{"disk": [{"prefix": "/a", "op": "read"}]}',
                                      '{"disk": [{"prefix": "/a", "op": "write", "errno": "X"}]}'])
    def test_parse_refuses_bad_documents(self, text: str) -> None:
        """A malformed document is a ValueError naming the fault."""
        with pytest.raises(ValueError):
            parse_faults(text)

    def test_rereads_when_replaced_and_ignores_garbage(self, tmp_path: Path) -> None:
        """A replaced file is re-read; a missing or unparsable one means no faults."""
        path = tmp_path / "f.json"
        ff = FaultFile(str(path), poll_seconds=0)
        assert not ff.current().cuts
        write_faults(path, {"cuts": [["a", "b"]]})
        assert ff.current().cut("a", "b")
        path.write_text("{not json")
        assert not ff.current().cuts
        write_faults(path, {"cuts": [["c", "d"]]})
        assert ff.current().cut("d", "c")
        path.unlink()
        assert not ff.current().cuts


class TestDiskHook:
    def test_fails_only_matching_operations(self, tmp_path: Path) -> None:
        """fsync faults fail fsync, fdatasync and a directory fsync under the prefix; write
        faults fail pwrite, truncate and fallocate; reads and other paths are untouched,
        and nothing is written by a failed write."""
        fpath = tmp_path / "faults.json"
        disk = FaultyDisk(OsDisk(), FaultFile(str(fpath), poll_seconds=0))
        bad, good = tmp_path / "bad", tmp_path / "good"
        bad.mkdir()
        good.mkdir()
        write_faults(fpath, {"disk": [{"prefix": f"{bad}/", "op": "fsync", "errno": "EIO"}]})
        f = disk.open(str(bad / "a"), create=True)
        f.pwrite(0, b"abc")
        for op in (f.fsync, f.fdatasync, lambda: disk.fsync_dir(str(bad))):
            with pytest.raises(OSError) as info:
                op()
            assert info.value.errno == errno.EIO
        atomic_replace(disk, str(good / "b"), b"fine")
        write_faults(fpath, {"disk": [{"prefix": f"{bad}/", "op": "write",
                                       "errno": "ENOSPC"}]})
        for op in (lambda: f.pwrite(3, b"d"), lambda: f.truncate(1),
                   lambda: f.fallocate(0, 4096)):
            with pytest.raises(OSError) as info:
                op()
            assert info.value.errno == errno.ENOSPC
        f.fsync()  # only writes fail now
        assert f.pread(0, 10) == b"abc"
        f.close()
        write_faults(fpath, {})
        atomic_replace(disk, str(bad / "c"), b"healed")
        assert disk.read_file(str(bad / "c")) == b"healed"


class TestRpcHook:
    def test_a_cut_drops_both_ways_and_heals(self, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """A cut between the server's and the client's UUIDs: the call never answers
        (either end alone drops it); another client is served; a lifted cut heals."""
        fpath = tmp_path / "faults.json"
        monkeypatch.setattr(faultfile, "ACTIVE", FaultFile(str(fpath), poll_seconds=0))
        runs: list[int] = []

        async def ping(request: Ping, context: CallContext) -> Ping:
            runs.append(request.n)
            return Ping(request.n + 1)

        service = Service("t")
        service.register("Ping", Ping, Ping, ping)

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                server = await nursery.start(serve_rpc, service, "srv")
                async with open_rpc_client("127.0.0.1", server.port, "srv", "peer") as c, \
                        open_rpc_client("127.0.0.1", server.port, "srv", "other") as o:
                    assert (await c.call("Ping", Ping(1), Ping)).n == 2
                    write_faults(fpath, {"cuts": [["srv", "peer"]]})
                    with trio.move_on_after(0.5) as scope:
                        await c.call("Ping", Ping(2), Ping)
                    assert scope.cancelled_caught
                    c.cast_nowait("Ping", Ping(3))  # dropped by the sender
                    assert (await o.call("Ping", Ping(4), Ping)).n == 5
                    # The receiving end drops too: a frame sent past the client's hook.
                    monkeypatch.setattr("revivify.impl.rpc.client.dropped",
                                        lambda local, remote: False)
                    with trio.move_on_after(0.5) as scope:
                        await c.call("Ping", Ping(5), Ping)
                    assert scope.cancelled_caught
                    write_faults(fpath, {})
                    assert (await c.call("Ping", Ping(6), Ping)).n == 7
                nursery.cancel_scope.cancel()

        trio.run(main)
        assert runs == [1, 4, 6]


class TestFaultClock:
    """impl/faultfile.py's FaultClock: trio's clock in a server under the fault file."""

    def clock(self, tmp_path: Path, now: list[float]) -> tuple[Path, FaultClock]:
        path = tmp_path / "faults.json"
        write_faults(path, {})
        return path, FaultClock(FaultFile(str(path), poll_seconds=0), 42,
                                real=lambda: now[0])

    def test_fast_jumps_and_never_back(self, tmp_path: Path) -> None:
        """The real clock's pace until a fault; then `rate` times it, plus what it jumped;
        healed, the real pace again with the jump kept; another process's entry is not
        this one's."""
        now = [100.0]
        path, clock = self.clock(tmp_path, now)
        assert clock.current_time() == 100.0
        now[0] = 101.0
        assert clock.current_time() == 101.0
        write_faults(path, {"clocks": [{"pid": 42, "rate": 2.0}, {"pid": 7, "rate": 9.0}]})
        assert clock.current_time() == 101.0  # continuous at the change
        now[0] = 102.0
        assert clock.current_time() == 103.0
        write_faults(path, {"clocks": [{"pid": 42, "rate": 2.0, "ahead": 1.5}]})
        assert clock.current_time() == 104.5  # the jump
        now[0] = 103.0
        assert clock.current_time() == 106.5
        write_faults(path, {})  # healed: 1x, the jump stays
        assert clock.current_time() == 106.5
        now[0] = 104.0
        assert clock.current_time() == 107.5
        write_faults(path, {"clocks": [{"pid": 42, "ahead": 1.0}]})  # less: ignored
        assert clock.current_time() == 107.5

    def test_sleep_time(self, tmp_path: Path) -> None:
        """Faulted seconds left, in real seconds (divided by the rate), at most one poll of
        the fault file (a fault made while trio sleeps is seen within it)."""
        now = [0.0]
        path, clock = self.clock(tmp_path, now)
        write_faults(path, {"clocks": [{"pid": 42, "rate": 4.0}]})
        t = clock.current_time()
        assert clock.deadline_to_sleep_time(t + 0.08) == pytest.approx(0.02)
        assert clock.deadline_to_sleep_time(t + 100.0) == faultfile.POLL_SECONDS
        assert clock.deadline_to_sleep_time(t - 1.0) == 0.0

    def test_a_jump_fires_trios_timers(self, tmp_path: Path) -> None:
        """Under trio: an hour's sleep ends when the clock jumps an hour ahead."""
        path = tmp_path / "faults.json"
        write_faults(path, {})
        clock = FaultClock(FaultFile(str(path)), os.getpid())
        woke: list[bool] = []

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                async def sleeper() -> None:
                    await trio.sleep(3600)
                    woke.append(True)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(sleeper)
                await trio.sleep(0.1)
                write_faults(path, {"clocks": [{"pid": os.getpid(), "ahead": 3600}]})
                # A guard in real time, so that a clock that ignored the jump fails the
                # test instead of hanging it.
                real_end = time.monotonic() + 60
                while time.monotonic() < real_end:
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

        trio.run(main, clock=clock)
        assert woke == [True]

    def test_off_without_the_fault_file(self, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
        monkeypatch.setattr(faultfile, "ACTIVE", None)
        assert clock_for_this_process() is None
        monkeypatch.setattr(faultfile, "ACTIVE", FaultFile(str(tmp_path / "f.json")))
        assert isinstance(clock_for_this_process(), FaultClock)

    @pytest.mark.parametrize("item", [{"rate": 2.0}, {"pid": 0}, {"pid": 1, "rate": 0},
                                      {"pid": 1, "ahead": -1}, {"pid": True}])
    def test_parse_refuses_bad_clocks(self, item: dict[str, object]) -> None:
        with pytest.raises(ValueError, match="clock fault"):
            parse_faults(json.dumps({"clocks": [item]}))
