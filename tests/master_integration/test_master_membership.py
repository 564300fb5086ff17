"""Masters join and leave (issue 19, "Masters join and leave"), in real processes.

One master and one tablet server; a second master started with ``master run --join`` is
added (``master add``): the leader copies the catalog to it and promotes it to VOTER once
caught up; it is then removed (``master remove``). The leader master cannot be removed.
Traces clean, the catalog tablet's copy to the new master included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from integration.helpers import call, run, wait_for

from master_integration.test_master_processes import (
    assert_traces_clean,
    create_table,
    ready_leader,
    table_names,
    wait_live,
)
from revivify.impl.client.master import master_status
from revivify.impl.master import api
from revivify.impl.processes.control import (
    ServerProcess,
    await_listening,
    free_port,
    kill_process,
    spawn,
    stop_process,
)
from revivify.impl.processes.masters import MASTER_LISTENING, MasterProcesses
from revivify.impl.tserver import api as ts_api


def moves(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


def catalog_member_type(address: str, uuid: str) -> str | None:
    """The new master's own view of its place in the catalog's config (None: no catalog
    there yet)."""
    try:
        info = call(address, uuid, ts_api.ADMIN_CONSENSUS_STATE,
                    ts_api.TabletRef(api.CATALOG_TABLET_ID), ts_api.ReplicaInfo)
    except Exception:
        return None
    return info.member_type if info.state == "RUNNING" else None


def test_master_add_then_remove(tmp_path: pytest.TempPathFactory) -> None:
    root = str(tmp_path)
    with MasterProcesses(root, masters=1, tservers=1) as cluster:
        cluster.start_all()
        old = cluster.masters[0]
        masters = cluster.master_list
        ready_leader(cluster)
        wait_live(cluster, 1)
        create_table(cluster.master_addresses, "before", 1, 1)

        new = ServerProcess(1, os.path.join(root, "m-new"), cluster.trace_dir,
                            os.path.join(root, "m-new.log"), port=free_port())
        spawn(new, [sys.executable, "-m", "revivify.impl.servers.master", "--fs-root",
                    new.fs_root, "--rpc-bind", new.address, "--trace-dir", new.trace_dir,
                    "--join", "--masters", f"{old.address},{new.address}"])
        try:
            new.uuid = await_listening(new, MASTER_LISTENING, "the new master", 30).group(1)
            added = moves("master", "add", new.address, "--masters", masters, "--json",
                          "--deadline", "30")
            assert added.returncode == 0, added.stderr
            doc = json.loads(added.stdout)
            assert doc["uuid"] == new.uuid and not doc["already_done"]

            # Copied and caught up: a VOTER on its own side, listed by the leader.
            wait_for(lambda: catalog_member_type(new.address, new.uuid) == "VOTER", 60,
                     "the new master a VOTER of the catalog")
            status = run(lambda: master_status(old.address))
            assert sorted(status.masters) == sorted([old.address, new.address])
            again = moves("master", "add", new.address, "--masters", masters, "--json")
            assert again.returncode == 0 and json.loads(again.stdout)["already_done"]
            # The catalog is served on: DDL through the two-master cluster.
            create_table(cluster.master_addresses, "after", 1, 1)
            assert table_names(cluster.master_addresses) == ["after", "before"]

            leader = moves("master", "remove", old.uuid, "--masters", masters)
            assert leader.returncode == 1 and "cannot be removed" in leader.stderr
            stale = moves("master", "remove", new.uuid, "--masters", masters, "--cas", "0")
            assert stale.returncode == 1, stale.stderr
            removed = moves("master", "remove", new.uuid, "--masters", masters, "--json")
            assert removed.returncode == 0, removed.stderr
            wait_for(lambda: run(lambda: master_status(old.address)).masters
                     == [old.address], 30, "one master again")
            bad = moves("master", "add", "nonsense", "--masters", masters)
            assert bad.returncode == 2
            stop_process(new, "the new master", 30)
        finally:
            kill_process(new)
        cluster.stop_all()
        assert_traces_clean(cluster)


def spawn_joiner(root: str, cluster: MasterProcesses, index: int, others: list[str],
                 extra: tuple[str, ...] = ()) -> ServerProcess:
    """A master started with ``--join`` (it waits for the catalog to be copied to it)."""
    new = ServerProcess(index, os.path.join(root, f"m-new{index}"), cluster.trace_dir,
                        os.path.join(root, f"m-new{index}.log"), port=free_port())
    spawn(new, [sys.executable, "-m", "revivify.impl.servers.master", "--fs-root",
                new.fs_root, "--rpc-bind", new.address, "--trace-dir", new.trace_dir,
                "--join", "--masters", ",".join([*others, new.address]), *extra])
    new.uuid = await_listening(new, MASTER_LISTENING, "a joining master", 30).group(1)
    return new


def live_at(address: str, uuid: str) -> int:
    """The tablet servers live as this very master sees them (any role: not redirected)."""
    reply = call(address, uuid, api.MASTER_LIST_TSERVERS, api.Empty(), api.TabletServerList)
    return sum(t.live for t in reply.tservers)


def test_added_masters_hear_every_tablet_server(tmp_path: pytest.TempPathFactory) -> None:
    """Issue 19: tablet servers started with one master's address learn the masters added
    later from the masters' answers; once the first master is killed, one of the added
    masters leads and already knows every tablet server live."""
    root = str(tmp_path)
    with MasterProcesses(root, masters=1, tservers=2) as cluster:
        cluster.start_all()
        old = cluster.masters[0]
        ready_leader(cluster)
        wait_live(cluster, 2)
        joined: list[ServerProcess] = []
        try:
            for k in (1, 2):
                new = spawn_joiner(root, cluster, k, [old.address])
                joined.append(new)
                added = moves("master", "add", new.address, "--masters", old.address,
                              "--json", "--deadline", "30")
                assert added.returncode == 0, added.stderr
                wait_for(lambda new=new: catalog_member_type(  # type: ignore[misc]
                    new.address, new.uuid) == "VOTER", 60, "the new master a VOTER")
            # Heartbeats reach the new masters although no server was told about them.
            for new in joined:
                wait_for(lambda new=new: live_at(new.address, new.uuid) == 2,  # type: ignore[misc]
                         30, f"{new.address} hears both tablet servers")
            kill_process(old)
            addresses = [n.address for n in joined]

            def new_leader() -> api.MasterStatus | None:
                for address in addresses:
                    try:
                        st = run(lambda a=address: master_status(a), 10)  # type: ignore[misc]
                    except Exception:
                        continue
                    if st.ready:
                        return st
                return None

            leader = wait_for(new_leader, 60, "an added master the ready leader")
            assert live_at(leader.address, leader.uuid) == 2
            # A client told only a dead master cannot learn; one told any live master can:
            # the CLI, given one added master, finds the leader and lists the tables.
            listed = moves("table", "list", "--masters", addresses[0], "--json")
            assert listed.returncode == 0, listed.stderr
            for new in joined:
                stop_process(new, "an added master", 30)
        finally:
            for new in joined:
                kill_process(new)
        cluster.stop_all()
        assert_traces_clean(cluster)


SMALL_CATALOG_LOG = ("--flush-mb", "0.002", "--log-retain-entries", "0")


def started_with_a_table(cluster: MasterProcesses, name: str) -> ServerProcess:
    """Start the one master and the tablet server, create table ``name``: the master."""
    cluster.start_all()
    ready_leader(cluster)
    wait_live(cluster, 1)
    create_table(cluster.master_addresses, name, 1, 1)
    return cluster.masters[0]


def catalog_segments(fs_root: str) -> list[str]:
    wals = os.path.join(fs_root, "wals", api.CATALOG_TABLET_ID)
    return sorted(n for n in os.listdir(wals) if n.startswith("wal-") and "." not in n)


def traced(trace_dir: str, event: str, node: str) -> list[dict[str, object]]:
    """Every traced ``event`` of ``node`` for the catalog tablet."""
    out: list[dict[str, object]] = []
    for name in sorted(os.listdir(trace_dir)):
        with open(os.path.join(trace_dir, name)) as f:
            for line in f:
                if f'"{event}"' not in line:
                    continue
                row = json.loads(line)
                if row.get("node") == node and row.get("tablet") == api.CATALOG_TABLET_ID \
                        and row.get("event") == event:
                    out.append(row)
    return out


def test_master_add_with_the_catalog_wal_gone(tmp_path: pytest.TempPathFactory) -> None:
    """The leader master's catalog WAL is garbage-collected past its first entries (a tiny
    flush threshold, no retained entries, a restart to close the first segment): the new
    master cannot replay the log from the start, it catches up by a copy of the flushed
    catalog, then serves the catalog itself (a follower read from it alone)."""
    root = str(tmp_path)
    with MasterProcesses(root, masters=1, tservers=1,
                       master_args=SMALL_CATALOG_LOG) as cluster:
        old = started_with_a_table(cluster, "early")
        first = catalog_segments(old.fs_root)[0]
        # A restart closes the active segment; the catalog writes after it flush the
        # rows, and the closed segment (every entry flushed, none retained) is deleted.
        cluster.stop_master(0)
        cluster.start_master(0)
        ready_leader(cluster)
        wait_live(cluster, 1)
        names = ["early"]
        for k in range(30):
            if first not in catalog_segments(old.fs_root):
                break
            create_table(cluster.master_addresses, f"t{k:02d}", 1, 1)
            names.append(f"t{k:02d}")
        assert first not in catalog_segments(old.fs_root), "the catalog WAL was not GC'd"

        new = spawn_joiner(root, cluster, 1, [old.address])
        try:
            added = moves("master", "add", new.address, "--masters", old.address, "--json",
                          "--deadline", "30")
            assert added.returncode == 0, added.stderr
            wait_for(lambda: catalog_member_type(new.address, new.uuid) == "VOTER", 60,
                     "the new master a VOTER")
            # The catalog came by a tablet copy, blocks included (the flushed rows).
            assert traced(cluster.trace_dir, "copy_begin", new.uuid)
            assert traced(cluster.trace_dir, "copy_blocks_done", new.uuid)
            assert traced(cluster.trace_dir, "copy_start_replica", new.uuid)
            # The new master serves the catalog from its own copy: a follower read.
            listed = moves("table", "list", "--masters", new.address, "--freshness", "5",
                           "--json", "--deadline", "30")
            assert listed.returncode == 0, listed.stderr
            doc = json.loads(listed.stdout)
            assert doc["served_by"]["uuid"] == new.uuid and not doc["served_by"]["leader"]
            assert sorted(t["name"] for t in doc["tables"]) == sorted(names)
            stop_process(new, "the new master", 30)
        finally:
            kill_process(new)
        cluster.stop_all()
        assert_traces_clean(cluster)


def test_master_add_while_ddl_never_stops(tmp_path: pytest.TempPathFactory) -> None:
    """DDL without a pause while a master joins, with no catalog entries retained: the
    copy's anchor stays on the leader's log after the copy ends (impl/tserver/copy/
    source.py, "The handover"), so the entries after the copied snapshot are still there
    when the new master first answers, and it catches up from the log while the DDL goes
    on. (Before, every flush between the copy's end and that answer collected them: each
    copy was outrun, and the new master never became a VOTER while the DDL lasted. Before
    that, the second copy was asked as DOES_NOT_EXIST and refused ILLEGAL_STATE at every
    retry, so it never caught up even after the DDL: the unit test of that is
    tests/consensus/test_progress.py's copied replica behind the log's GC.)"""
    root = str(tmp_path)
    with MasterProcesses(root, masters=1, tservers=1,
                         master_args=SMALL_CATALOG_LOG) as cluster:
        old = started_with_a_table(cluster, "early")
        new = spawn_joiner(root, cluster, 1, [old.address])
        names = ["early"]
        stop = threading.Event()
        failed: list[BaseException] = []

        def ddl() -> None:
            try:
                while not stop.is_set():
                    name = f"n{len(names):04d}"
                    create_table([old.address], name, 1, 1)
                    names.append(name)
            except BaseException as exc:  # the test fails with it below
                failed.append(exc)

        writer = threading.Thread(target=ddl, name="ddl", daemon=True)
        try:
            added = moves("master", "add", new.address, "--masters", old.address, "--json",
                          "--deadline", "30")
            assert added.returncode == 0, added.stderr
            writer.start()
            wait_for(lambda: bool(failed) or catalog_member_type(new.address, new.uuid)
                     == "VOTER", 90, "the new master a VOTER while the DDL goes on")
            assert not failed, failed
            assert writer.is_alive()  # it became a VOTER during the DDL, not after it
            stop.set()
            writer.join(60)
            assert not writer.is_alive() and not failed, failed
            listed = moves("table", "list", "--masters", new.address, "--freshness", "5",
                           "--json", "--deadline", "30")
            assert listed.returncode == 0, listed.stderr
            doc = json.loads(listed.stdout)
            assert doc["served_by"]["uuid"] == new.uuid
            assert sorted(t["name"] for t in doc["tables"]) == sorted(names)
            stop_process(new, "the new master", 30)
        finally:
            stop.set()
            kill_process(new)
        cluster.stop_all()
        assert_traces_clean(cluster)
