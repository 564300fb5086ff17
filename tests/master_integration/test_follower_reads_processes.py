"""Follower reads within their freshness bound, in real processes (issue 19; KUDU-500;
impl/master/queries.py "Follower reads"; in process: tests/master/test_follower_reads.py).

Three masters on 127.0.0.1. A follower, named alone in ``--masters``, answers
``table list --freshness S`` itself (the answer says it served as a follower). With every
other master SIGSTOPped it can get no read index (no leader answers, and it cannot be
elected alone): once the bound has passed it refuses (StaleCatalog), the client has no
other master to ask, and the command gives up at its deadline (exit 2, "no master
answered", the StaleCatalog named as the last error). After SIGCONT it serves again.
SIGCONT in a ``finally``; a clean stop and the trace checker at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from integration.helpers import wait_for

from master_integration.test_master_processes import (
    assert_traces_clean,
    create_table,
    ready_leader,
    wait_live,
)
from revivify.impl.processes.masters import MasterProcesses


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


def follower_list(address: str, freshness: str, deadline: str = "20"
                  ) -> subprocess.CompletedProcess[str]:
    return cli("table", "list", "--masters", address, "--freshness", freshness, "--json",
               "--deadline", deadline)


def test_a_follower_serves_within_its_bound_and_refuses_when_cut_off(
        tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=1) as cluster:
        cluster.start_all()
        leader = ready_leader(cluster)
        wait_live(cluster, 1)
        create_table(cluster.master_addresses, "fr", 1, 1)
        follower = next(i for i in range(3) if i != leader)
        me = cluster.masters[follower]

        served = follower_list(me.address, "5")
        assert served.returncode == 0, served.stderr
        doc = json.loads(served.stdout)
        assert doc["served_by"]["uuid"] == me.uuid and doc["served_by"]["leader"] is False
        assert doc["served_by"]["staleness"] <= 5
        assert [t["name"] for t in doc["tables"]] == ["fr"]

        others = [m for m in cluster.masters if m.index != follower]
        pids = [m.proc.pid for m in others if m.proc is not None]
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            time.sleep(1.2)  # the 1 s bound is past for any anchor taken before the stop
            refused = follower_list(me.address, "1", deadline="4")
            assert refused.returncode == 2, (refused.stdout, refused.stderr)
            assert refused.stdout == ""
            # The deadline's error names the last refusal: StaleCatalog, with the bound.
            assert "deadline reached" in refused.stderr, refused.stderr
            assert "is stale" in refused.stderr and "the bound is 1.000 s" in refused.stderr, \
                refused.stderr
            assert time.monotonic() - stopped_at >= 1.2
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

        # In touch with a leader again: it serves within the bound again.
        def serves() -> bool:
            again = follower_list(me.address, "5", deadline="10")
            return again.returncode == 0 and \
                json.loads(again.stdout)["served_by"]["uuid"] == me.uuid
        wait_for(serves, 60, "the follower serving again after SIGCONT")
        cluster.stop_all()
        assert_traces_clean(cluster)
