"""The master client with the leader master SIGSTOPped and listed first: real processes.

Three masters and three tablet servers on 127.0.0.1. The leader master is stopped (its
connections accepted, nothing answered) and named first in ``--masters``: the catalog
commands and the row commands through the masters still answer (the client asks every
master at once, each within the call timeout, and the two others elect a new leader), and
``master list`` shows the stopped one as unreachable with the other two. SIGCONT in a
``finally``; a clean stop and the trace checker at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from integration.helpers import wait_for
from master_integration.test_master_processes import (
    assert_traces_clean,
    create_table,
    ready_leader,
    wait_live,
    wait_running,
)

from revivify.impl.processes.masters import MasterProcesses

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


def test_catalog_and_rows_with_the_first_listed_leader_master_stopped(
        tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=3) as cluster:
        cluster.start_all()
        leader = ready_leader(cluster)
        wait_live(cluster, 3)
        create_table(cluster.master_addresses, "stall", 2, 3)
        wait_running(cluster, "stall")
        order = [leader] + [i for i in range(3) if i != leader]
        m = ",".join(cluster.masters[i].address for i in order)
        assert cli("row", "put", "--masters", m, "--table", "stall", "k0", "v0").returncode == 0

        proc = cluster.masters[leader].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            listed = cli("table", "list", "--masters", m, "--json")
            assert listed.returncode == 0, listed.stderr
            assert [t["name"] for t in json.loads(listed.stdout)["tables"]] == ["stall"]
            put = cli("row", "put", "--masters", m, "--table", "stall", "k1", "v1")
            assert put.returncode == 0, put.stderr
            get = cli("row", "get", "--masters", m, "--table", "stall", "k1")
            assert (get.returncode, get.stdout) == (0, "v1\n"), get.stderr
            described = cli("table", "describe", "stall", "--masters", m, "--json")
            assert described.returncode == 0, described.stderr
            assert len(json.loads(described.stdout)["tablets"]) == 2
            masters = cli("master", "list", "--masters", m, "--json")
            assert masters.returncode == 0, masters.stderr
            rows = {r["address"]: r for r in json.loads(masters.stdout)["masters"]}
            roles = {address: r["role"] for address, r in rows.items()}
            stopped = rows[cluster.masters[leader].address]
            assert stopped["live"] is False and stopped["role"] is None
            assert stopped["member_type"] == "VOTER" and stopped["uuid"]
            assert sorted(roles[cluster.masters[i].address] for i in order[1:]) == [
                "FOLLOWER", "LEADER"]
        finally:
            os.kill(proc.pid, signal.SIGCONT)

        def old_leader_follows() -> bool:
            got = cli("row", "get", "--masters", m, "--table", "stall", "k0")
            return got.returncode == 0 and got.stdout == "v0\n"
        wait_for(old_leader_follows, 60, "rows readable after SIGCONT")
        cluster.stop_all()
        assert_traces_clean(cluster)
