"""Regression tests for the two master bugs the master simulation found (the "found here"
section of test_master_simulation.py, which holds the programs): the shrunk programs
replayed after the fixes.

1. CREATING_TABLET_REPLACED: rows acknowledged by a tablet still CREATING in the catalog
   were lost when the leader master replaced it after its creation timeout. Fixed by
   giving writers locations of RUNNING tablets only (impl/master/queries.py "Locations for
   writers", impl/client/table.py).
2. CREATE_AFTER_DELETE: a CreateTablet retried after the DeleteTablet DELETED of its table
   recreated the deleted replica at term 0 (TermRegression). Fixed by re-checking every
   attempt of a master call against the releasing term and the committed catalog
   (impl/master/calls.py "Every attempt re-checked"), and by the tablet server refusing a
   master's create of a tablet it deleted (impl/tserver/manager/core.py ``deleted``).
3. TOMBSTONE_UNKNOWN_LEADER: a tombstone could not answer a leader its config did not
   name, so the NON_VOTER added on it never got its copy and the tablet never healed.
   Fixed by Raft pushes naming where their sender listens (RaftMessages.src_address).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_master_simulation import (
    CREATE_AFTER_DELETE,
    CREATING_TABLET_REPLACED,
    TOMBSTONE_UNKNOWN_LEADER,
    _check_traces,
)

from revivify.impl.testing.master_simulation import MasterSimulation


@pytest.mark.parametrize("seed", [1, 3, 200])
def test_rows_acknowledged_before_a_creation_timeout_survive_it(tmp_path: Path,
                                                                 seed: int) -> None:
    """Every acknowledged row is there after the servers stay down past creation_timeout."""
    with MasterSimulation(str(tmp_path / "traces"), seed=seed) as sim:
        for step in CREATING_TABLET_REPLACED:
            sim.run(step)
            sim.check_durable()
        assert sim.mcounters.rows_acked == 3
        sim.verify()


def test_a_late_create_call_does_not_revive_a_deleted_replica(tmp_path: Path) -> None:
    """The 35-step program of seed 31 keeps every trace clean (no TermRegression)."""
    with MasterSimulation(str(tmp_path / "traces"), seed=31,
                          master_options={"creation_timeout": 10000.0}) as sim:
        for step in CREATE_AFTER_DELETE:
            sim.run(step)
            sim.check_durable()
            _check_traces(sim)
        sim.verify()
        sim.check_durable()
        _check_traces(sim)


def test_a_tombstone_answers_a_leader_it_never_knew(tmp_path: Path) -> None:
    """The 30-step program of seed 5337 heals: every tablet back to 3 RUNNING voters."""
    with MasterSimulation(str(tmp_path / "traces"), seed=5337) as sim:
        for step in TOMBSTONE_UNKNOWN_LEADER:
            sim.run(step)
            sim.check_durable()
        sim.verify()
        sim.check_durable()
        _check_traces(sim)
