"""Data-driven Raft scenarios: every script under testdata/ runs, its output compared.

Each script (see raft_script.py for the commands) tells one story of the protocol: an
election, a pre-vote that keeps a rejoining server from disrupting a leader, the repair of
a diverged log, the figure-8 case of the Raft paper, config changes with their
compare-and-set refusals, NON_VOTER promotion, leadership transfer, check-quorum, ReadIndex,
crashes inside a Ready. The expected output lists every message delivered (or lost), every
durable change with its trace fact, every entry applied and every read answered, so a
reviewer reads a script like a protocol diagram. Beyond the text, the harness checks Raft's
safety properties at every step (impl/testing/raft.py) and the runner asserts after every
command that no core reports an anomaly.

``REVIVIFY_REWRITE=1 pytest tests/consensus/test_scenarios.py`` rewrites the expected
output in place: review the diff, and commit it only if every change is intended.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from raft_script import render, rewrite_requested, run_script

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


def test_there_are_scenarios() -> None:
    assert len(SCRIPTS) >= 9


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    blocks, trailer, _ = run_script(path)
    expected = path.read_text()
    actual = render(blocks, trailer)
    if rewrite_requested():
        if actual != expected:
            path.write_text(actual)
        return
    if actual != expected:
        diff = "".join(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            f"{path.name} (expected)", f"{path.name} (actual)"))
        pytest.fail(f"{path.name}: output differs (REVIVIFY_REWRITE=1 to accept):\n{diff}")
