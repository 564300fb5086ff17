"""Row commands through the masters, in real processes: 3 masters, 3 tablet servers.

A table's rows are routed by the key's hash bucket to its tablet (impl/client/table.py):
the library and the CLI (``row put|get|delete|scan --masters ... --table NAME``) put, read
and delete rows; each row is found on exactly the tablet its bucket names (read back with
the ``--tservers ... --tablet ID`` form, which works unchanged); a scan merges every tablet
in key order; a kill -9 of the leader master does not stop rows from being served (cached
locations), and a fresh client finds the locations on the new leader. Ends with a clean
stop and the trace checker over every process.
"""

from __future__ import annotations

import json

import pytest
from integration.helpers import run

from master_integration.test_master_processes import (
    OPTIONS,
    assert_traces_clean,
    cli,
    create_table,
    ready_leader,
    wait_live,
    wait_running,
)
from revivify.impl.client import TableNotFoundError, open_table_client, open_tablet_client
from revivify.impl.client.table import routes_from
from revivify.impl.master.catalog import hash_bucket
from revivify.impl.processes.masters import MasterProcesses


def test_rows_through_the_masters(tmp_path: pytest.TempPathFactory) -> None:
    with MasterProcesses(str(tmp_path), masters=3, tservers=3) as cluster:
        cluster.start_all()
        masters = cluster.master_addresses
        m = ",".join(masters)
        tservers = ",".join(s.address for s in cluster.tservers.servers)
        ready_leader(cluster)
        wait_live(cluster, 3)
        create_table(masters, "rows", 4, 3)
        locs = wait_running(cluster, "rows")
        routes = routes_from(locs)
        keys = [b"key-%03d" % i for i in range(24)]
        assert {hash_bucket(k, 4) for k in keys} == {0, 1, 2, 3}  # every tablet gets rows

        async def write_all() -> list[tuple[bytes, bytes]]:
            async with open_table_client(masters, "rows", options=OPTIONS) as table:
                for k in keys:
                    written = await table.put(k, b"v-" + k)
                    assert not written.duplicate
                assert await table.get(keys[0]) == b"v-" + keys[0]
                await table.delete(keys[1])
                assert await table.get(keys[1]) is None
                assert table.refreshes == 1  # one GetTableLocations for it all
                return await table.scan()
        rows = run(write_all)
        expected = sorted((k, b"v-" + k) for k in keys if k != keys[1])
        assert rows == expected

        # Each row lives on the tablet of its bucket and on no other (read with the
        # tablet client, as the --tservers form does; that form once through the CLI).
        servers = [s.address for s in cluster.tservers.servers]

        async def where() -> dict[bytes, set[str]]:
            found: dict[bytes, set[str]] = {k: set() for k in keys}
            for route in routes.by_partition.values():
                async with open_tablet_client(servers, route.tablet_id,
                                              options=OPTIONS) as tablet:
                    for k in keys:
                        if await tablet.get(k) is not None:
                            found[k].add(route.tablet_id)
            return found
        homes = run(where)
        for k in keys:
            home = routes.route(k)
            assert home is not None
            assert homes[k] == (set() if k == keys[1] else {home.tablet_id}), k
        home0 = routes.route(keys[0])
        assert home0 is not None
        by_tablet = cli("row", "get", "--tservers", tservers, "--tablet", home0.tablet_id,
                        keys[0].decode(), "--json")
        assert by_tablet.returncode == 0 and json.loads(by_tablet.stdout)["value"] == \
            "v-key-000"

        # The CLI: the same shapes, JSON keys and exit codes as the --tablet form.
        put = cli("row", "put", "--masters", m, "--table", "rows", "cli-key", "cli-value",
                  "--json")
        assert put.returncode == 0, put.stderr
        assert set(json.loads(put.stdout)) == {"key", "value", "index", "duplicate"}
        got = cli("row", "get", "--masters", m, "--table", "rows", "cli-key", "--json")
        assert got.returncode == 0 and json.loads(got.stdout) == {"key": "cli-key",
                                                                   "value": "cli-value"}
        missing = cli("row", "get", "--masters", m, "--table", "rows", "nope", "--json")
        assert missing.returncode == 1 and json.loads(missing.stdout)["value"] is None
        gone = cli("row", "delete", "--masters", m, "--table", "rows", "cli-key", "--json")
        assert gone.returncode == 0 and set(json.loads(gone.stdout)) == {"key", "index",
                                                                         "duplicate"}
        scan = cli("row", "scan", "--masters", m, "--table", "rows", "--start", "key-005",
                   "--end", "key-015", "--limit", "6", "--json")
        assert scan.returncode == 0, scan.stderr
        assert [r["key"] for r in json.loads(scan.stdout)["rows"]] == [
            f"key-{i:03d}" for i in range(5, 11)]
        text = cli("row", "scan", "--masters", m, "--table", "rows", "--limit", "2")
        assert text.stdout.splitlines() == ["key-000\tv-key-000", "key-002\tv-key-002"]
        unknown = cli("row", "get", "--masters", m, "--table", "nope", "k")
        assert unknown.returncode == 1 and "not found" in unknown.stderr  # a definite "no"
        both = cli("row", "get", "--masters", m, "--table", "rows", "--tablet", "x", "k")
        assert both.returncode == 2 and "not both" in both.stderr
        with pytest.raises(TableNotFoundError):
            async def lookup() -> None:
                async with open_table_client(masters, "nope", options=OPTIONS) as table:
                    await table.get(b"k")
            run(lookup)

        # kill -9 of the leader master: a client with cached locations goes on, and a new
        # client finds the locations on the new leader.
        leader = ready_leader(cluster)

        async def after_failover() -> None:
            async with open_table_client(masters, "rows", options=OPTIONS) as table:
                assert await table.get(keys[2]) == b"v-" + keys[2]
                cluster.kill_master(leader)
                await table.put(b"after", b"failover")
                assert await table.get(keys[3]) == b"v-" + keys[3]
                assert table.refreshes == 1
        run(after_failover)
        fresh = cli("row", "get", "--masters", m, "--table", "rows", "after", "--json",
                    "--deadline", "30")
        assert fresh.returncode == 0 and json.loads(fresh.stdout)["value"] == "failover"
        cluster.stop_all()
        assert_traces_clean(cluster)
