"""The cluster heals itself, in real processes (issue 19, first section).

Masters and tablet servers as real processes (MasterProcesses), driven through the client
library and the CLI. Each test ends with a clean stop and the trace checker over every
process's trace (the masters' catalog_commit / master_call facts included: every
ChangeConfig released for a recorded tablet, every tombstone with its record's CAS).

* kill -9 one of 4 tablet servers: every tablet is back to 3 live VOTERs on the other
  servers, and the rows written before are read back (`row put/get --masters --table`);
* `tserver retire`: the server ends holding no replica, the table healthy, and a second run
  (the resumable case) finds nothing left to do;
* kill -9 of the leader master right after MoveReplica was recorded: the next leader
  completes the move from the catalog alone.

No timing assertions; every wait has a deadline (generous: the machine is shared). The
time from the kill to a healed table is printed (pytest -s) for the report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest
from integration.helpers import run, wait_for

from master_integration.test_master_processes import (
    OPTIONS,
    assert_traces_clean,
    create_table,
    hosted,
    locations,
    ready_leader,
    wait_live,
    wait_running,
)
from revivify.impl.client.master import master_call
from revivify.impl.master import api
from revivify.impl.processes.masters import MasterProcesses

# Fast failure detection for the kill test: a server silent 2 s is failed (the default is
# 3 s). The retire and failover tests need no failure detection: a long timeout keeps a
# server stalled by a loaded machine from starting a move of its own in the middle of them.
MASTER_ARGS = ("--tserver-failed-after-ms", "2000")
PATIENT_ARGS = ("--tserver-failed-after-ms", "30000")


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=timeout, check=False)


def retire_cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "tserver",
                           "retire", *argv],
                          capture_output=True, text=True, timeout=timeout, check=False)


def healthy(cluster: MasterProcesses, name: str, avoid: Sequence[str] = ()
            ) -> api.TableLocationsReply | None:
    """The table's locations once every tablet has exactly its 3 replicas as live VOTERs,
    none on ``avoid``, no move in progress, and each replica RUNNING on its server."""
    locs = locations(cluster.master_addresses, name)
    seen = hosted(cluster)
    for tablet in locs.tablets:
        if tablet.state != "RUNNING" or tablet.moving_from is not None:
            return None
        if len(tablet.replicas) != 3 or not all(
                r.member_type == "VOTER" and r.live and r.uuid not in avoid
                for r in tablet.replicas):
            return None
        if any(seen.get(r.uuid, {}).get(tablet.tablet_id) != "RUNNING"
               for r in tablet.replicas):
            return None
    return locs


def put_rows(masters: str, table: str, n: int) -> None:
    for i in range(n):
        got = cli("row", "put", "--masters", masters, "--table", table, f"key-{i:03d}",
                  f"value-{i}", "--json", "--deadline", "30")
        assert got.returncode == 0, got.stderr


def assert_rows(masters: str, table: str, n: int) -> None:
    for i in range(n):
        got = cli("row", "get", "--masters", masters, "--table", table, f"key-{i:03d}",
                  "--json", "--deadline", "30")
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["value"] == f"value-{i}", got.stdout


def test_kill_9_of_a_tablet_server_is_healed(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=1, tservers=4,
                       master_args=MASTER_ARGS) as cluster:
        cluster.start_all()
        masters = cluster.master_list
        ready_leader(cluster)
        wait_live(cluster, 4)
        create_table(cluster.master_addresses, "healme", 3, 3)
        locs = wait_running(cluster, "healme", 60)
        put_rows(masters, "healme", 3)

        # The victim: the server holding the most replicas (all 3 tablets have one on at
        # least three of the four servers).
        counts: dict[str, int] = {}
        for tablet in locs.tablets:
            for r in tablet.replicas:
                counts[r.uuid] = counts.get(r.uuid, 0) + 1
        victim = max(counts, key=lambda u: (counts[u], u))
        index = next(s.index for s in cluster.tservers.servers if s.uuid == victim)
        cluster.tservers.kill(index)
        killed_at = time.monotonic()

        wait_for(lambda: healthy(cluster, "healme", avoid=[victim]), 180,
                 "every tablet back to 3 live voters off the killed server")
        print(f"\nhealed {counts[victim]} tablet(s) in {time.monotonic() - killed_at:.1f}s "
              f"after kill -9 of {victim}")
        assert_rows(masters, "healme", 3)
        cluster.stop_all()
        assert_traces_clean(cluster)


def test_retire_moves_every_replica_off(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=1, tservers=4,
                       master_args=PATIENT_ARGS) as cluster:
        cluster.start_all()
        masters = cluster.master_list
        ready_leader(cluster)
        wait_live(cluster, 4)
        create_table(cluster.master_addresses, "retired", 4, 3)
        locs = wait_running(cluster, "retired", 60)
        put_rows(masters, "retired", 4)
        # Retire a server that leads at least one tablet if there is one (the leadership
        # hand-over is part of the story).
        leaders = [r.uuid for t in locs.tablets for r in t.replicas if r.leader]
        uuid = leaders[0]

        holding = sum(any(r.uuid == uuid for r in t.replicas) for t in locs.tablets)
        # A first run killed (-9) once it has asked for its moves: they are in the catalog.
        first = subprocess.Popen(
            [sys.executable, "-m", "revivify.impl.cli.main", "tserver", "retire", uuid,
             "--masters", masters], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: first.poll() is not None or any(
                t.moving_from == uuid for t in locations(cluster.master_addresses,
                                                         "retired").tablets),
                60, "a move recorded by the first run")
        finally:
            first.kill()
            first.wait(30)
        # Run again: it continues from the catalog and finishes.
        got = retire_cli(uuid, "--masters", masters, "--json")
        assert got.returncode == 0, got.stderr
        summary = json.loads(got.stdout)
        assert summary["tserver"] == uuid and summary["remaining"] == 0
        assert summary["count"] <= holding and f"({summary['count']}/" in got.stderr \
            if summary["count"] else True
        assert all(m["to"] != uuid and uuid not in m["replicas"] and len(m["replicas"]) == 3
                   for m in summary["moved"])
        wait_for(lambda: healthy(cluster, "retired", avoid=[uuid]), 120, "healthy")
        # Run again (resumable; here: nothing left to do).
        again = retire_cli(uuid, "--masters", masters, "--json")
        assert again.returncode == 0 and json.loads(again.stdout)["count"] == 0, again.stderr
        unknown = retire_cli("0" * 32, "--masters", masters)
        assert unknown.returncode == 1 and "no tablet server" in unknown.stderr
        assert_rows(masters, "retired", 4)
        cluster.stop_all()
        assert_traces_clean(cluster)


def test_master_failover_in_the_middle_of_a_move(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=4,
                       master_args=PATIENT_ARGS) as cluster:
        cluster.start_all()
        masters = cluster.master_addresses
        ready_leader(cluster)
        wait_live(cluster, 4)
        create_table(masters, "moving", 1, 3)
        locs = wait_running(cluster, "moving", 60)
        tablet = locs.tablets[0]
        source = next(r.uuid for r in tablet.replicas if not r.leader)
        members = {r.uuid for r in tablet.replicas}
        dest = next(s.uuid for s in cluster.tservers.servers if s.uuid not in members)
        assert dest is not None

        moved = run(lambda: master_call(masters, api.MASTER_MOVE_REPLICA,
                                        api.MoveReplicaRequest(tablet.tablet_id, source,
                                                               dest),
                                        api.MoveReplicaReply, OPTIONS))
        assert not moved.done
        # The move is recorded; kill the leader master before it can finish it.
        cluster.kill_master(ready_leader(cluster))

        def moved_over() -> bool:
            now = locations(masters, "moving").tablets[0]
            uuids = {r.uuid for r in now.replicas}
            return uuids == (members - {source}) | {dest} and now.moving_from is None \
                and all(r.member_type == "VOTER" for r in now.replicas)
        wait_for(moved_over, 120, "the move completed by the next leader master")
        wait_for(lambda: healthy(cluster, "moving", avoid=[source]), 60, "healthy")
        # A retry of the move after it finished answers done.
        again = run(lambda: master_call(masters, api.MASTER_MOVE_REPLICA,
                                        api.MoveReplicaRequest(tablet.tablet_id, source,
                                                               dest),
                                        api.MoveReplicaReply, OPTIONS))
        assert again.done
        cluster.stop_all()
        assert_traces_clean(cluster)


def test_a_failed_replica_on_a_live_server_is_replaced(
        tmp_path: pytest.TempPathFactory) -> None:
    """A replica whose WAL is damaged goes FAILED at its server's restart (the server lives
    on, serving its other replicas); the master replaces it: a NON_VOTER added elsewhere,
    promoted, then the FAILED one removed (and tombstoned)."""
    with MasterProcesses(str(tmp_path), masters=1, tservers=4,
                       master_args=PATIENT_ARGS) as cluster:
        cluster.start_all()
        masters = cluster.master_list
        ready_leader(cluster)
        wait_live(cluster, 4)
        create_table(cluster.master_addresses, "failme", 1, 3)
        locs = wait_running(cluster, "failme", 60)
        put_rows(masters, "failme", 3)
        (tablet,) = locs.tablets
        victim = next(r.uuid for r in tablet.replicas if not r.leader)
        index = next(s.index for s in cluster.tservers.servers if s.uuid == victim)
        server = cluster.tservers.servers[index]
        cluster.tservers.stop(index)  # a clean stop closes the segment: not the last one
        wals = os.path.join(server.fs_root, "wals", tablet.tablet_id)
        first = sorted(os.path.join(wals, n) for n in os.listdir(wals)
                       if n.startswith("wal-") and not n.endswith(".tmp.new"))[0]
        with open(first, "r+b") as f:  # one flipped byte in the middle: a checksum fails
            f.seek(os.path.getsize(first) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        cluster.tservers.start(index)
        wait_for(lambda: hosted(cluster).get(victim, {}).get(tablet.tablet_id) == "FAILED",
                 30, "the damaged replica FAILED on its (live) server")
        failed_at = time.monotonic()
        wait_for(lambda: healthy(cluster, "failme", avoid=[victim]), 180,
                 "the tablet back to 3 live voters without the FAILED replica")
        print(f"\nreplaced the FAILED replica in {time.monotonic() - failed_at:.1f}s")
        # The server itself was never taken for dead: it is live all along.
        wait_live(cluster, 4)
        assert_rows(masters, "failme", 3)
        cluster.stop_all()
        assert_traces_clean(cluster)
