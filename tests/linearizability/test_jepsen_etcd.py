"""The recorded Jepsen histories of etcd (tests/data/histories/jepsen-etcd, README there):
every file gets its known verdict, and a failing file's window fails on its own.

All of them together take about 3 s (the slowest, etcd_002 and etcd_040, about 1 s each on
one core), so none is marked slow.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from revivify.checker.linearizability import check_history, pair_events, read_events

DATA = Path(__file__).parent.parent / "data" / "histories" / "jepsen-etcd"
LABELS = {name: verdict == "true" for name, verdict in
          (line.split() for line in (DATA / "labels.txt").read_text().splitlines() if line)}


def test_every_log_has_a_label() -> None:
    assert sorted(LABELS) == sorted(p.name for p in DATA.glob("*.log"))
    assert len(LABELS) == 52


@pytest.mark.parametrize("name", sorted(LABELS))
def test_verdict_matches_the_label(name: str) -> None:
    path = DATA / name
    with path.open(encoding="utf-8") as lines:
        history = pair_events(str(path), read_events(str(path), lines, "jepsen", keyed=False))
    started = time.monotonic()
    result = check_history(history, timeout=60.0)
    elapsed = time.monotonic() - started
    assert result.linearizable is LABELS[name], f"{name}: {elapsed:.2f} s"
    if not result.linearizable:
        window = result.keys[0].window
        assert window is not None and window.minimal
        assert any(w.role == "complete" for w in window.operations)
