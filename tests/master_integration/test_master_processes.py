"""Masters as real processes: 3 masters (or 1) and 3 tablet servers on 127.0.0.1.

Each test runs the processes (impl/processes/masters.py), drives them through the client
library (impl/client/master.py, as the CLI does), and ends with a clean stop and the trace
checker over every process's trace (the catalog tablet's Raft facts included).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest
from integration.helpers import assert_traces_clean as _traces_clean
from integration.helpers import call, run, wait_for

from revivify.impl.client import ClientOptions
from revivify.impl.client.master import master_call, master_status
from revivify.impl.master import api
from revivify.impl.processes.masters import MasterProcesses
from revivify.impl.rpc import RpcError
from revivify.impl.tserver import api as ts_api

OPTIONS = ClientOptions(deadline=30.0)


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=60, check=False)


def assert_traces_clean(cluster: MasterProcesses) -> None:
    _traces_clean(cluster.tservers)  # same trace directory: masters' traces included


def create_table(masters: Sequence[str], name: str, tablets: int, replicas: int
                 ) -> api.TableCreatedReply:
    request = api.CreateTableRequest(name, [], tablets, replicas, request_id=f"req-{name}")
    return run(lambda: master_call(masters, api.MASTER_CREATE_TABLE, request,
                                   api.TableCreatedReply, OPTIONS))


def locations(masters: Sequence[str], name: str) -> api.TableLocationsReply:
    return run(lambda: master_call(masters, api.MASTER_TABLE_LOCATIONS, api.TableName(name),
                                   api.TableLocationsReply, OPTIONS))


def table_names(masters: Sequence[str]) -> list[str]:
    reply = run(lambda: master_call(masters, api.MASTER_LIST_TABLES, api.Empty(),
                                    api.TableList, OPTIONS))
    return [t.name for t in reply.tables]


def hosted(cluster: MasterProcesses) -> dict[str, dict[str, str]]:
    """server uuid -> {tablet id: state} as each running tablet server reports itself."""
    out: dict[str, dict[str, str]] = {}
    for s in cluster.tservers.servers:
        if s.running:
            status = call(s.address, s.uuid, ts_api.ADMIN_STATUS, ts_api.Empty(),
                          ts_api.ServerStatus)
            out[s.uuid] = {r.tablet_id: r.state for r in status.replicas}
    return out


def ready_leader(cluster: MasterProcesses, seconds: float = 30.0) -> int:
    """The index of the ready leader master."""
    def find() -> int | None:
        for m in cluster.masters:
            if not m.running:
                continue
            try:
                st = run(lambda m=m: master_status(m.address), 10)  # type: ignore[misc]
            except (RpcError, OSError, Exception):
                continue
            if st.ready:
                return m.index + 1
        return None
    return int(wait_for(find, seconds, "a ready leader master")) - 1


def wait_running(cluster: MasterProcesses, name: str, seconds: float = 30.0
                 ) -> api.TableLocationsReply:
    """Every tablet of ``name`` RUNNING in the catalog (a leader reported) and RUNNING on
    each of its replicas' servers."""
    masters = cluster.master_addresses

    def done() -> api.TableLocationsReply | None:
        locs = locations(masters, name)
        if any(t.state != "RUNNING" for t in locs.tablets):
            return None
        seen = hosted(cluster)
        for t in locs.tablets:
            for r in t.replicas:
                if seen.get(r.uuid, {}).get(t.tablet_id) != "RUNNING":
                    return None
        return locs
    locs: api.TableLocationsReply = wait_for(done, seconds, f"table {name} RUNNING")
    return locs


def wait_live(cluster: MasterProcesses, n: int, seconds: float = 20.0) -> None:
    def live() -> bool:
        reply = run(lambda: master_call(cluster.master_addresses, api.MASTER_LIST_TSERVERS,
                                        api.Empty(), api.TabletServerList, OPTIONS))
        return sum(t.live for t in reply.tservers) >= n
    wait_for(live, seconds, f"{n} live tablet servers")


def test_three_masters_create_failover_delete(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=3) as cluster:
        cluster.start_all()
        masters = cluster.master_addresses
        ready_leader(cluster)
        wait_live(cluster, 3)

        # CreateTable: 4 tablets x 3 replicas reach RUNNING on the tablet servers.
        created = create_table(masters, "t1", 4, 3)
        assert len(created.tablet_ids) == 4
        locs = wait_running(cluster, "t1")
        assert {t.tablet_id for t in locs.tablets} == set(created.tablet_ids)
        assert all(len(t.replicas) == 3 and sum(r.leader for r in t.replicas) == 1
                   for t in locs.tablets)
        # A retry of the same request answers OK with the same table.
        again = create_table(masters, "t1", 4, 3)
        assert again.already_existed and again.table_id == created.table_id

        # kill -9 the leader master: another is elected and serves.
        old = ready_leader(cluster)
        cluster.kill_master(old)
        started = time.monotonic()
        assert table_names(masters) == ["t1"]
        new = ready_leader(cluster)
        assert new != old
        # KUDU-1358: right after the election, CreateTable spreads tablets over every live
        # server, because every master recorded their heartbeats all along. 3 tablets of
        # 1 replica on 3 equally loaded servers: one each.
        spread = create_table(masters, "t2", 3, 1)
        failover = time.monotonic() - started
        locs2 = wait_running(cluster, "t2")
        owners = sorted(t.replicas[0].uuid for t in locs2.tablets)
        assert owners == sorted(s.uuid for s in cluster.tservers.servers), owners
        assert failover < 20, failover
        assert len(spread.tablet_ids) == 3

        # DeleteTable deletes the replicas (mode DELETED: nothing left on the servers).
        run(lambda: master_call(masters, api.MASTER_DELETE_TABLE, api.TableName("t1"),
                                api.TableDeletedReply, OPTIONS))
        assert table_names(masters) == ["t2"]

        def gone() -> bool:
            seen = hosted(cluster)
            return not any(t in tablets for tablets in seen.values()
                           for t in created.tablet_ids)
        wait_for(gone, 30, "t1's replicas deleted from every tablet server")

        # The killed master comes back as a follower and catches up.
        cluster.start_master(old)

        def caught_up() -> bool:
            st = run(lambda: master_status(masters[old]), 10)
            return st.role == "FOLLOWER" and st.leader is not None
        wait_for(caught_up, 30, "the restarted master to follow")
        cluster.stop_all()
        assert_traces_clean(cluster)


def test_single_master(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=1, tservers=3) as cluster:
        cluster.start_all()
        masters = cluster.master_addresses
        ready_leader(cluster)
        wait_live(cluster, 3)
        created = create_table(masters, "solo", 2, 3)
        wait_running(cluster, "solo")
        # Refusals are typed and final: a second table of the name, an unknown table.
        with pytest.raises(Exception, match="ALREADY_PRESENT"):
            request = api.CreateTableRequest("solo", [], 1, 1, request_id="other")
            run(lambda: master_call(masters, api.MASTER_CREATE_TABLE, request,
                                    api.TableCreatedReply, OPTIONS))
        with pytest.raises(Exception, match="NOT_FOUND"):
            run(lambda: master_call(masters, api.MASTER_DELETE_TABLE, api.TableName("nope"),
                                    api.TableDeletedReply, OPTIONS))
        # The CLI: --json documents with the keys scripts read, exit 1 for a refusal.
        m = ",".join(masters)
        status = cli("master", "status", "--master", masters[0], "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["ready"] is True
        tables = json.loads(cli("table", "list", "--masters", m, "--json").stdout)["tables"]
        assert [(t["name"], t["state"], t["tablets"]) for t in tables] == [("solo", "RUNNING",
                                                                           2)]
        servers = json.loads(cli("tserver", "list", "--masters", m, "--json").stdout)
        assert sum(t["live"] for t in servers["tservers"]) == 3
        missing = cli("table", "delete", "nope", "--masters", m)
        assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
        made = cli("table", "create", "cli", "--masters", m, "--tablets", "1", "--replicas",
                   "1", "--json")
        assert made.returncode == 0 and len(json.loads(made.stdout)["tablets"]) == 1
        assert cli("table", "delete", "cli", "--masters", m).returncode == 0
        # Pointed at the wrong kind of server: said at once, in operator words (issue 31).
        ts_address = cluster.tservers.servers[0].address
        for argv in (("master", "status", "--master", ts_address),
                     ("ksck", "--masters", ts_address),
                     ("table", "list", "--masters", ts_address)):
            wrong = cli(*argv)
            assert wrong.returncode == 2, (argv, wrong.stderr)
            assert f"{ts_address} is a tablet server, not a master" in wrong.stderr, argv
            assert "unknown method" not in wrong.stderr and "out of time" not in wrong.stderr
        wrong = cli("tserver", "status", "--tserver", masters[0])
        assert wrong.returncode == 2
        assert f"{masters[0]} is a master, not a tablet server" in wrong.stderr
        # table describe shows the whole schema, each column with the version that added it.
        assert cli("table", "create", "cols", "--masters", m, "--tablets", "1", "--replicas",
                   "1").returncode == 0
        assert cli("table", "alter", "cols", "--masters", m, "--add-column",
                   "c1:int64").returncode == 0
        described = cli("table", "describe", "cols", "--masters", m, "--json")
        columns = json.loads(described.stdout)["columns"]
        assert [(c["name"], c["type"], c["added_in"]) for c in columns][-1] == ("c1", "int64", 1)
        assert all(c["added_in"] == 0 for c in columns[:-1]) and columns[0]["key"]
        text = cli("table", "describe", "cols", "--masters", m).stdout
        assert "c1 int64 (v1)" in text, text
        again = cli("table", "alter", "cols", "--masters", m, "--add-column", "c1:int64")
        assert again.returncode == 1 and "already exists" in again.stderr
        assert cli("table", "delete", "cols", "--masters", m).returncode == 0
        for bad in ("-1", "0"):
            refused = cli("table", "create", "x", "--masters", m, "--tablets", bad)
            assert refused.returncode == 2 and "must be >= 1" in refused.stderr
        assert cli("table", "create", "x", "--masters", "bad").returncode == 2
        # The catalog is the master's own tablet: a client or admin call for it through the
        # tablet-server API is refused (a write would bypass every master operation).
        master = cluster.masters[0]
        for method, body, reply in (
                (ts_api.DATA_WRITE, ts_api.Write("sys-catalog", "intruder", 0, []),
                 ts_api.Written),
                (ts_api.ADMIN_DELETE_TABLET, ts_api.DeleteTablet("sys-catalog"), ts_api.Ack)):
            with pytest.raises(ts_api.InvalidArgument, match="internal"):
                call(master.address, master.uuid, method, body, reply)
        # A restart of the master rebuilds its catalog from the catalog tablet alone.
        cluster.stop_master(0)
        cluster.start_master(0)
        ready_leader(cluster)
        assert table_names(masters) == ["solo"]
        locs = locations(masters, "solo")
        assert sorted(t.tablet_id for t in locs.tablets) == sorted(created.tablet_ids)
        cluster.stop_all()
        assert_traces_clean(cluster)

