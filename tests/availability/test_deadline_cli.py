"""The CLI's ``--deadline`` holds through the masters (issue 32, bug 2): real processes.

One master and one tablet server on 127.0.0.1, a table of one tablet. The master is
SIGSTOPped (its connections accepted, nothing answered), so a fresh ``row put --masters
... --deadline 2`` cannot learn where the table's tablet is. The client library gives up at
the deadline itself (not the CLI's backstop, 0.25 s later, which says only "no answer
within the deadline") and says which operation ran out, and at which step: "put on table
dl (asking the masters for its locations): out of time ...", exit 2, the write "failed"
(it was sent nowhere). The time is measured against the CLI's own start-up (a command that
fails at once on its usage), so only the work after start-up is held to the bound.

The first test does not reproduce an overrun: the original code also ended by the deadline
there (its message named Master.GetTableLocations, not the put). The second does: three
masters and one tablet server, the leader master and the tablet server both SIGSTOPped.
The put's location lookup succeeds only once the two other masters have elected a new
leader (a second or two), and the tablet server never answers. Before the fix the tablet
part then took a fresh deadline of its own, so the command ran into the CLI's backstop
("no answer within the deadline of 3s", 0.25 s late, not saying what was waited for); now
the library gives up at the deadline, naming the write and its last error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from master_integration.test_master_processes import (
    create_table,
    ready_leader,
    wait_live,
    wait_running,
)

from revivify.impl.cli.main import main as cli_main
from revivify.impl.client.options import DEADLINE_SLACK
from revivify.impl.processes.masters import MasterProcesses

pytestmark = pytest.mark.timeout(300)

DEADLINE = 2.0
STARTUP_JITTER = 1.0  # a loaded machine's variance in starting a Python process


def cli(*argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)
    return done, time.monotonic() - started


def test_a_put_through_stalled_masters_ends_by_its_deadline_saying_why(
        tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=1, tservers=1) as cluster:
        cluster.start_all()
        ready_leader(cluster)
        wait_live(cluster, 1)
        masters = cluster.master_addresses
        create_table(masters, "dl", 1, 1)
        wait_running(cluster, "dl")
        m = ",".join(masters)
        put, _ = cli("row", "put", "--masters", m, "--table", "dl", "k0", "v0")
        assert put.returncode == 0, put.stderr

        proc = cluster.masters[0].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            usage, startup = cli("row", "put", "--masters", m, "--table", "dl")  # no key
            assert usage.returncode == 2
            put, elapsed = cli("row", "put", "--masters", m, "--table", "dl", "k1", "v1",
                               "--deadline", f"{DEADLINE:g}", "--json")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        print(f"\nrow put --deadline {DEADLINE:g} with the master stopped: {elapsed:.2f}s "
              f"(start-up alone {startup:.2f}s): {put.stderr.strip()}")
        assert put.returncode == 2, put.stderr
        assert "put on table dl (asking the masters for its locations): out of time" in \
            put.stderr, put.stderr
        assert "it was not applied" in put.stderr
        assert json.loads(put.stdout)["outcome"] == "failed"
        assert elapsed - startup <= DEADLINE + DEADLINE_SLACK + STARTUP_JITTER


def test_a_put_whose_lookup_is_slow_and_whose_tablet_is_silent_ends_by_its_deadline(
        tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's ``main`` run in this process, right after the stops (a subprocess's
    start-up would give the masters time to elect before the put asks them, and blur the
    time measured)."""
    with MasterProcesses(str(tmp_path), masters=3, tservers=1) as cluster:
        cluster.start_all()
        leader = ready_leader(cluster)
        wait_live(cluster, 1)
        masters = cluster.master_addresses
        create_table(masters, "dl3", 1, 1)
        wait_running(cluster, "dl3")
        m = ",".join(masters)
        put, _ = cli("row", "put", "--masters", m, "--table", "dl3", "k0", "v0")
        assert put.returncode == 0, put.stderr

        stopped = [cluster.masters[leader].proc, cluster.tservers.servers[0].proc]
        pids = [proc.pid for proc in stopped if proc is not None]
        assert len(pids) == 2
        capsys.readouterr()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            code = cli_main(["row", "put", "--masters", m, "--table", "dl3", "k1", "v1",
                             "--deadline", "3", "--call-timeout", "1", "--json"])
            elapsed = time.monotonic() - started
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        out, err = capsys.readouterr()
        print(f"\nrow put --deadline 3 (in process), leader master and tablet server "
              f"stopped: {elapsed:.2f}s: {err.strip()}")
        assert code == 2, err
        assert "no answer within the deadline of" not in err  # not the CLI's backstop
        assert "out of time (deadline reached)" in err, err
        assert json.loads(out)["outcome"] in ("failed", "unknown")
        assert elapsed <= 3 + DEADLINE_SLACK
