"""Seeded bugs in the real master, caught by the trace checker: the catalog checks are
shown able to fail on what a real master process writes, not only on hand-made traces.

Each test starts a real cluster (one master, three tablet servers) whose master runs with
one bug (mutants/sitecustomize.py, injected through PYTHONPATH: the product has no hook
for it), creates a table (then restarts the master, for a bug of its rebuild), stops the
cluster and checks the traces: the finding must be the rule the bug breaks; for issue 32's
rules, the checker's mutant without the rule must accept the same traces. The same
scenario without a bug checks clean in test_master_processes.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from revivify.checker.local import check_paths
from revivify.impl.processes.masters import MasterProcesses
from revivify.spec.mutants import CATALOG_MUTANTS

from .test_master_processes import create_table, ready_leader, wait_live

MUTANTS = Path(__file__).resolve().parent / "mutants"


@pytest.mark.parametrize(("mutant", "rule", "restart"), [
    ("calls_before_commit", "CallAfterCommit", False),
    ("table_before_tablets", "NoHalfCreatedTable", False),
    # Issue 32: a rebuild that lost rows shows only once a ready follows a write, so the
    # master restarts after the CreateTable (its gate opens again on the rebuilt catalog).
    ("rebuild_loses_rows", "ReadyHoldsCommittedRecords", True),
    ("gate_ignores_leadership", "ReadyLeaderElected", False),
])
def test_a_seeded_master_bug_is_caught(mutant: str, rule: str, restart: bool,
                                       tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{MUTANTS}{os.pathsep}{path}" if path else str(MUTANTS))
    monkeypatch.setenv("REVIVIFY_MASTER_MUTANT", mutant)
    with MasterProcesses(str(tmp_path), masters=1, tservers=3) as cluster:
        cluster.start_all()
        ready_leader(cluster)
        wait_live(cluster, 3)
        create_table(cluster.master_addresses, "seeded", 2, 3)
        if restart:
            cluster.stop_master(0)
            cluster.start_master(0)
            ready_leader(cluster)
        cluster.stop_all()
        trace_dir = cluster.trace_dir
        report = check_paths([trace_dir])
    kinds = report.kinds()
    assert rule in kinds, report.text()
    # Only the master's rules: the tablet servers did nothing wrong.
    assert kinds <= {rule, "CallAfterCommit", "NoHalfCreatedTable"}, report.text()
    # ...and the checker's mutant without that rule accepts the same traces: the rule,
    # not some other check, is what catches the bug.
    if rule in ("ReadyHoldsCommittedRecords", "ReadyLeaderElected"):
        blind = check_paths([trace_dir], catalog=CATALOG_MUTANTS[f"catalog_without_{rule}"])
        assert rule not in blind.kinds() and blind.exit_code() == 0, blind.text()
