"""The CLI with one tablet server SIGSTOPped: three real server processes on 127.0.0.1.

A SIGSTOPped server is the stall a client cannot see coming: the kernel still accepts its
connections, nothing answers. The bugs these tests pin (issue 20): with the stopped server
listed first in ``--tservers``, every new ``row put``/``row get`` failed after the whole
10 s deadline with exit 2 although a new leader had been elected within a second, and
``tablet status`` printed "no answer within the deadline" and nothing about the two
healthy servers. Every stopped process is continued (SIGCONT) in a ``finally``, and every
test ends with a clean stop and the trace checker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest
from integration.helpers import assert_traces_clean, create_tablet, leader

from revivify.impl.processes.tservers import ProcessCluster

pytestmark = pytest.mark.timeout(300)

TABLET = "t-stall"


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


@contextmanager
def stopped(cluster: ProcessCluster, indexes: list[int]) -> Iterator[None]:
    """SIGSTOP the servers at `indexes` for the block; SIGCONT them whatever happens."""
    procs = [cluster.servers[i].proc for i in indexes]
    pids = [proc.pid for proc in procs if proc is not None]
    assert len(pids) == len(indexes), indexes
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def timed(*argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = cli(*argv)
    return result, time.monotonic() - started


@pytest.mark.parametrize("role", ["leader", "follower"])
def test_rows_and_status_with_the_first_listed_server_stopped(
        tmp_path: pytest.TempPathFactory, role: str) -> None:
    with ProcessCluster(str(tmp_path), 3) as cluster:
        cluster.start_all()
        create_tablet(cluster, TABLET)
        lead = leader(cluster, TABLET)
        victim = lead if role == "leader" else (lead + 1) % 3
        order = [victim] + [i for i in range(3) if i != victim]
        ts = ",".join(cluster.servers[i].address for i in order)
        flags = ["--tservers", ts, "--tablet", TABLET]
        assert cli("row", "put", *flags, "k0", "v0").returncode == 0

        with stopped(cluster, [victim]):
            put, put_seconds = timed("row", "put", *flags, "k1", "v1", "--json")
            assert put.returncode == 0, put.stderr  # within the default 10 s deadline
            assert json.loads(put.stdout)["key"] == "k1"
            get, get_seconds = timed("row", "get", *flags, "k1")
            assert (get.returncode, get.stdout) == (0, "v1\n"), get.stderr
            old = cli("row", "get", *flags, "k0")
            assert (old.returncode, old.stdout) == (0, "v0\n"), old.stderr

            # (a call timeout a loaded machine's healthy servers cannot miss; the stopped
            # one costs exactly that, within the deadline)
            slow_ok = ["--call-timeout", "4"]
            status, status_seconds = timed("tablet", "status", *flags, *slow_ok, "--json")
            assert status.returncode == 0, status.stderr
            doc = json.loads(status.stdout)
            rows = {r["address"]: r for r in doc["replicas"]}
            silent = rows[cluster.servers[victim].address]
            assert silent["answer"] == "no answer" and silent["live"] is False
            assert "role" not in silent  # no state claimed for a server that gave none
            healthy = [rows[cluster.servers[i].address] for i in order[1:]]
            assert [r["answer"] for r in healthy] == ["ok", "ok"]
            assert all(r["state"] == "RUNNING" for r in healthy)
            assert doc["leader_address"] in {r["address"] for r in healthy}

            text = cli("tablet", "status", *flags, *slow_ok)
            assert text.returncode == 0, text.stderr
            lines = text.stdout.splitlines()
            header = lines[1].split()
            assert header[:4] == ["ADDRESS", "UUID", "ANSWER", "STATE"]
            by_address = {line.split()[0]: line for line in lines[2:5]}
            assert "no answer" in by_address[cluster.servers[victim].address]
            for i in order[1:]:
                assert " ok " in by_address[cluster.servers[i].address]
            print(f"\n{role} stopped, listed first: row put {put_seconds:.2f}s, row get "
                  f"{get_seconds:.2f}s, tablet status {status_seconds:.2f}s")

        after = cli("row", "get", *flags, "k1")  # the stopped server back: all is well
        assert (after.returncode, after.stdout) == (0, "v1\n"), after.stderr
        for i in range(3):
            assert cluster.stop(i) == 0
        assert_traces_clean(cluster)


def test_every_server_stopped_is_a_definite_failure_and_nothing_reachable(
        tmp_path: pytest.TempPathFactory) -> None:
    """Nothing answers at all: a write never sent is "failed" (not "unknown"), exit 2;
    tablet status lists every server as silent, exit 2."""
    with ProcessCluster(str(tmp_path), 3) as cluster:
        cluster.start_all()
        create_tablet(cluster, TABLET)
        leader(cluster, TABLET)
        ts = ",".join(cluster.addresses)
        flags = ["--tservers", ts, "--tablet", TABLET, "--deadline", "3"]
        with stopped(cluster, [0, 1, 2]):
            put = cli("row", "put", *flags, "k", "v", "--json")
            assert put.returncode == 2, put.stderr
            doc = json.loads(put.stdout)
            assert doc["outcome"] == "failed" and doc["key"] == "k"
            assert "it was not applied" in put.stderr
            status = cli("tablet", "status", *flags, "--json")
            assert status.returncode == 2, status.stderr
            assert [r["answer"] for r in json.loads(status.stdout)["replicas"]] == [
                "no answer"] * 3
            assert "no server answered" in status.stderr
        for i in range(3):
            assert cluster.stop(i) == 0
        assert_traces_clean(cluster)
