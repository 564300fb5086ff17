"""What an operator sees of the masters and replicas (issue 31), in real processes.

* ``table create --replicas 3`` with 2 live tablet servers is refused (exit 1, "not
  enough live tablet servers") well before its deadline: a master that has run longer
  than its dead-after timeout has heard every live server, so its count is certain and
  neither it nor the client asks again;
* ``master list`` naming one master lists the catalog's whole Raft config (every member's
  uuid, address, member type, role, term, live), a killed member included as not live;
  ``master status --json`` carries the config's members;
* one notion of a dead tablet server: a master refuses to start with
  ``--tserver-failed-after-ms`` below ``--tserver-dead-after-ms``, and after a kill -9
  ``tserver list`` says DEAD no later than the healing policy starts moving replicas.

No timing assertions beyond generous bounds (an answer "well before the deadline"); every
wait polls with a deadline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from integration.helpers import wait_for

from master_integration.test_master_processes import (
    create_table,
    locations,
    ready_leader,
    wait_live,
    wait_running,
)
from revivify.impl.processes.masters import MasterProcesses


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=timeout, check=False)


def cli_json(*argv: str) -> Any:
    got = cli(*argv, "--json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


# A short dead-after, so that the masters are sure of their live servers within a second
# of starting; failed-after above it (the enforced order).
FAST_DEAD = ("--tserver-dead-after-ms", "1000", "--tserver-failed-after-ms", "3000")


def test_not_enough_servers_and_the_whole_master_config(tmp_path: pytest.TempPathFactory
                                                        ) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=2,
                         master_args=FAST_DEAD) as cluster:
        cluster.start_all()
        leader = ready_leader(cluster, 60)
        wait_live(cluster, 2, 60)
        masters = cluster.master_list

        # Certain at once: the deadline is long, the answer must not wait for it.
        deadline = 60.0
        started = time.monotonic()
        got = cli("table", "create", "t", "--replicas", "3", "--masters", masters,
                  "--deadline", f"{deadline:g}")
        took = time.monotonic() - started
        assert got.returncode == 1, (got.returncode, got.stderr)
        assert "not enough live tablet servers: 3 needed for the replicas, 2 live" in \
            got.stderr, got.stderr
        assert took < deadline / 2, f"the refusal took {took:.1f}s of a {deadline:g}s deadline"
        print(f"\nNOT_ENOUGH_SERVERS answered in {took:.2f}s (deadline {deadline:g}s)")

        # master list naming one master: the whole config, each member with its own role.
        one = cluster.masters[leader].address
        rows = cli_json("master", "list", "--masters", one, "--deadline", "30")["masters"]
        assert sorted(r["address"] for r in rows) == sorted(cluster.master_addresses)
        assert all(set(r) >= {"uuid", "address", "member_type", "role", "term", "live"}
                   for r in rows)
        assert all(r["member_type"] == "VOTER" and r["live"] and r["uuid"] for r in rows)
        assert sorted(r["role"] for r in rows) == ["FOLLOWER", "FOLLOWER", "LEADER"]
        status = cli_json("master", "status", "--master", one)
        assert sorted(m["address"] for m in status["masters"]) == \
            sorted(cluster.master_addresses)
        assert {m["uuid"] for m in status["masters"]} == {r["uuid"] for r in rows}
        text = cli("master", "list", "--masters", one)
        assert text.returncode == 0 and text.stdout.count("VOTER") == 3, text.stdout

        # A member killed: still listed (from the config), not live, its uuid known.
        victim = next(i for i in range(3) if i != leader)
        victim_uuid = next(r["uuid"] for r in rows
                           if r["address"] == cluster.masters[victim].address)
        cluster.kill_master(victim)
        rows = cli_json("master", "list", "--masters", one, "--deadline", "30")["masters"]
        dead = next(r for r in rows if r["address"] == cluster.masters[victim].address)
        assert dead["live"] is False and dead["role"] is None
        assert dead["uuid"] == victim_uuid and dead["member_type"] == "VOTER"
        assert dead["error"] == "connection refused", dead
        assert sum(r["live"] for r in rows) == 2


def test_a_master_refuses_failed_after_below_dead_after(tmp_path: Path) -> None:
    got = cli("master", "run", "--fs-root", str(tmp_path / "m"), "--rpc-bind",
              "127.0.0.1:7001", "--tserver-dead-after-ms", "5000",
              "--tserver-failed-after-ms", "3000", timeout=60)
    assert got.returncode == 2, (got.returncode, got.stdout, got.stderr)
    line = got.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, got.stderr
    assert "--tserver-failed-after-ms 3000" in line and "--tserver-dead-after-ms 5000" in line


def test_tserver_list_says_dead_no_later_than_replicas_move(
        tmp_path: pytest.TempPathFactory) -> None:
    # The smallest legal gap: failed-after equal to dead-after.
    args = ("--tserver-dead-after-ms", "1500", "--tserver-failed-after-ms", "1500")
    with MasterProcesses(str(tmp_path), masters=1, tservers=4, master_args=args) as cluster:
        cluster.start_all()
        ready_leader(cluster, 60)
        wait_live(cluster, 4, 60)
        masters = cluster.master_list
        create_table(cluster.master_addresses, "dead", 1, 3)
        locs = wait_running(cluster, "dead", 60)
        victim = locs.tablets[0].replicas[0].uuid
        index = next(s.index for s in cluster.tservers.servers if s.uuid == victim)
        cluster.tservers.kill(index)

        checks = 0

        def moved_and_listed_dead() -> bool:
            # The replica move is read FIRST, then tserver list: a move seen at t1 means the
            # master had the victim failed at t1, hence (failed-after >= dead-after, one
            # clock, one last heartbeat) dead at t1 and at every later t2 it stays silent.
            nonlocal checks
            tablet = locations(cluster.master_addresses, "dead").tablets[0]
            moving = tablet.moving_from == victim or victim not in {
                r.uuid for r in tablet.replicas}
            listed = {t["uuid"]: t["live"] for t in cli_json(
                "tserver", "list", "--masters", masters)["tservers"]}
            if moving:
                assert listed.get(victim) is False, \
                    "replicas move off a server that tserver list still calls live"
            checks += 1
            return moving

        wait_for(moved_and_listed_dead, 120, "the healing policy moving the killed server's "
                                             "replica")
        assert checks >= 1
        ksck = cli("ksck", "--masters", masters, "--json")
        doc = json.loads(ksck.stdout)
        assert any(t["uuid"] == victim and t["live"] is False for t in doc["tservers"])
