"""Power loss in real processes: tablet servers on the lazy disk (impl/storage/lazy.py), every
one killed at once, so whatever was acknowledged but not fsynced is gone, as after a power
cut. The WAL's fsync is what keeps acknowledged writes; the seeded bug "WAL append without
fsync" (tests/impl_mutants, ``wal_append_not_fsynced``) must lose them here and be caught by
``revivify history check``, which a kill -9 on a healthy kernel never shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.tablet.ops import RowOp

from .helpers import Writer, assert_traces_clean, create_tablet, leader, read_all, run

MUTANTS = Path(__file__).resolve().parent.parent / "impl_mutants"
KEYS = 40


def _power_loss_history(root: Path) -> tuple[list[dict[str, object]], ProcessCluster]:
    """Acknowledged puts (one key each), all three servers killed together and started
    again, then a final read of every key: the kv history of all of it."""
    events: list[dict[str, object]] = []
    c = ProcessCluster(str(root), 3)
    c.start_all()
    create_tablet(c, "t1")
    leader(c, "t1")
    writers = [Writer(c, "t1", f"w{n}") for n in range(4)]

    async def lane(n: int) -> None:
        for i in range(n, KEYS, len(writers)):
            events.append({"process": n, "type": "invoke", "f": "write", "key": i,
                           "value": i})
            await writers[n].write([RowOp("put", str(i).encode(), str(i).encode())])
            events.append({"process": n, "type": "ok", "f": "write", "key": i, "value": i})

    async def write_all() -> None:
        async with trio.open_nursery() as nursery:
            for n in range(len(writers)):
                nursery.start_soon(lane, n)

    run(write_all, seconds=120)
    for i in range(3):
        c.kill(i)  # the power cut: every server at once, no fsync after the last ack
    for i in range(3):
        c.spawn(i)
    for i in range(3):
        c.await_started(i)
    rows = run(lambda: read_all(c, "t1", seconds=60), seconds=90)
    for i in range(KEYS):
        got = rows.get(str(i).encode())
        events.append({"process": 100, "type": "invoke", "f": "read", "key": i,
                       "value": None})
        events.append({"process": 100, "type": "ok", "f": "read", "key": i,
                       "value": None if got is None else int(got)})
    return events, c


def _history_check(events: list[dict[str, object]], path: Path) -> int:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "history", "check",
                           str(path), "--model", "kv"], capture_output=True, text=True,
                          timeout=300)
    return done.returncode


def test_acknowledged_writes_survive_a_power_loss(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIVIFY_LAZY_DISK", "1")
    events, c = _power_loss_history(tmp_path / "cluster")
    with c:
        assert _history_check(events, tmp_path / "history.jsonl") == 0
        assert_traces_clean(c)


def test_a_wal_that_skips_fsync_loses_acknowledged_writes_under_power_loss(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIVIFY_LAZY_DISK", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(MUTANTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("REVIVIFY_IMPL_MUTANT", "wal_append_not_fsynced")
    events, c = _power_loss_history(tmp_path / "cluster")
    with c:
        lost = [e for e in events if e["f"] == "read" and e["type"] == "ok"
                and e["value"] is None]
        assert lost, "the seeded bug lost nothing: the lazy disk is not losing unsynced data"
        assert _history_check(events, tmp_path / "history.jsonl") == 1
