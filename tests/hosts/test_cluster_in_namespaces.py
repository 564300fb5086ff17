"""A cluster across "hosts" (issue 31): 3 masters and 3 tablet servers, each a real process
in a network namespace of its own, and the client in a seventh.

The namespaces are the nemesis's (impl/testing/nemesis/netns.py: one veth per namespace on
a bridge in a hub namespace, one address each in a /24 no route of this machine uses, every
name carrying the run's id, so two runs never meet; ``root=False``: not even a veth into
the root namespace, whose links and routes stay as they were). A
namespace's loopback reaches only its own processes, so a server that named itself by
127.0.0.1, or by the wildcard it binds, could be reached by nobody: the cluster works only
if every address that travels (the masters list, registrations, Raft configs, copy
sources, the client's locations) is the advertised one. The masters bind their namespace's
address; the tablet servers bind ``0.0.0.0`` and advertise their namespace's address
(``--rpc-advertised-address``), as on a machine with several interfaces.

One test, as a script: the probe that the hosts really are separate (127.0.0.1:<another
server's port> refuses from inside a namespace, that server's own address answers), a
table of 3 replicas created and written from the client's namespace, kill -9 of a tablet
server (writes still succeed) and of the leader master (the next one serves), both
restarted until ksck says HEALTHY, every row read back, a clean stop, and the trace checker
clean over every process's trace. The namespaces are deleted on the way out, however the
test ends (the processes first: a process keeps its namespace alive).

Needs root, ip and nft (the Makefile's nft target installs them); skipped otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from revivify.impl.processes.control import free_port
from revivify.impl.processes.masters import MasterProcesses
from revivify.impl.testing.nemesis.netns import KernelNetwork, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None,
                                reason=f"network namespaces: {unavailable()}")

MASTERS = [f"m{i}" for i in range(3)]
TSERVERS = [f"ts{i}" for i in range(3)]
CLIENT = "client"
ROWS = 4
T = TypeVar("T")


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[tuple[KernelNetwork, MasterProcesses]]:
    """The six servers' namespaces and the client's, and the cluster placed in them (not
    started). On the way out: every process killed, then every namespace deleted."""
    net = KernelNetwork([*MASTERS, *TSERVERS, CLIENT], root=False)
    try:
        ports: set[int] = set()
        while len(ports) < len(TSERVERS):  # distinct: the loopback probe names each
            ports.add(free_port())
        cluster = MasterProcesses(
            str(tmp_path), masters=len(MASTERS), tservers=len(TSERVERS),
            master_placements=[net.placement(m) for m in MASTERS],
            tserver_placements=[net.placement(t, wildcard=True) for t in TSERVERS],
            tserver_ports=sorted(ports), tserver_args=["--heartbeat-ms", "250"],
            start_timeout=120.0)
        try:
            yield net, cluster
        finally:
            cluster.close()
    finally:
        net.close()
    assert net.names() == []


def wait_for(what: str, probe: Callable[[], T | None], seconds: float = 120.0) -> T:
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {seconds:g}s")
        time.sleep(0.3)


def test_a_cluster_across_six_hosts(
        hosts: tuple[KernelNetwork, MasterProcesses], tmp_path: Path) -> None:
    net, cluster = hosts
    assert net.root_link not in net.names()  # the root namespace gained no link
    started = time.monotonic()
    cluster.start_all()
    masters = cluster.master_list
    tservers = cluster.tservers.servers
    advertised = {s.address for s in tservers}
    assert not any(a.startswith(("127.", "0.0.0.0")) for a in [*advertised, masters])

    def revivify(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The CLI as a user on the client's own host runs it."""
        return subprocess.run(
            net.command(CLIENT, [sys.executable, "-m", "revivify.impl.cli.main", *argv]),
            capture_output=True, text=True, timeout=timeout, check=False,
            stdin=subprocess.DEVNULL)

    def doc(*argv: str) -> Any:
        out = revivify(*argv, "--masters", masters, "--json")
        return json.loads(out.stdout) if out.returncode == 0 else None

    # Separate hosts: another server's port is closed on this host's loopback (where a
    # wildcard bind answers its own server), open at that server's address.
    ts0, ts1 = tservers[0], tservers[1]
    assert net.connects("ts0", "127.0.0.1", ts0.port)
    assert not net.connects("ts0", "127.0.0.1", ts1.port)
    assert net.connects("ts0", ts1.host, ts1.port)
    m0 = cluster.masters[0]
    assert not net.connects(CLIENT, "127.0.0.1", m0.port)
    assert net.connects(CLIENT, m0.host, m0.port)

    # Every server known by its advertised address.
    listed = wait_for("3 live tablet servers", lambda: _live(doc("tserver", "list")))
    assert {t["address"] for t in listed} == advertised, listed
    mdoc = wait_for("3 masters", lambda: doc("master", "list"))
    assert sorted(m["address"] for m in mdoc["masters"]) == sorted(cluster.master_addresses)

    created = revivify("table", "create", "t", "--masters", masters, "--tablets", "2",
                       "--replicas", "3", "--json")
    assert created.returncode == 0, created.stderr
    put_rows(revivify, masters, range(ROWS))

    # kill -9 of a tablet server: two replicas of three still make a majority.
    cluster.tservers.kill(2)
    put_rows(revivify, masters, range(ROWS, 2 * ROWS))

    # kill -9 of the leader master: the next one, found by its advertised address, serves.
    def leader_master() -> str | None:
        found = doc("master", "list")
        return next((m["address"] for m in found["masters"] if m["role"] == "LEADER"),
                    None) if found else None

    index = cluster.master_addresses.index(wait_for("a leader master", leader_master))
    cluster.kill_master(index)
    put_rows(revivify, masters, range(2 * ROWS, 3 * ROWS))

    cluster.tservers.start(2)
    cluster.start_master(index)
    healed_from = time.monotonic()
    ksck = wait_for("a HEALTHY ksck", lambda: _healthy(revivify, masters), seconds=180)
    healed = time.monotonic() - healed_from
    replicas = {r["address"] for table in ksck["tables"] for tablet in table["tablets"]
                for r in tablet["replicas"]}
    assert replicas == advertised, replicas  # the Raft configs name advertised addresses
    for m in ksck["masters"]:  # and so does the catalog's
        assert m["config"] == sorted(cluster.master_addresses), m

    rows = revivify("row", "scan", "--masters", masters, "--table", "t", "--json",
                    "--deadline", "60")
    assert rows.returncode == 0, rows.stderr
    got = {r["key"]: r["value"] for r in json.loads(rows.stdout)["rows"]}
    assert got == {f"key-{i:03d}": f"value-{i}" for i in range(3 * ROWS)}

    cluster.stop_all()
    check = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "trace", "check",
                            cluster.trace_dir], capture_output=True, text=True, timeout=600,
                           check=False)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    print(f"\nsix hosts: whole run {time.monotonic() - started:.1f}s, "
          f"restarts to HEALTHY {healed:.1f}s")


def _live(found: Any) -> list[dict[str, Any]] | None:
    rows: list[dict[str, Any]] = found["tservers"] if found else []
    return rows if len(rows) == 3 and all(r["live"] for r in rows) else None


def _healthy(revivify: Callable[..., subprocess.CompletedProcess[str]],
             masters: str) -> Any:
    out = revivify("ksck", "--masters", masters, "--json")
    return json.loads(out.stdout) if out.returncode == 0 else None


def put_rows(revivify: Callable[..., subprocess.CompletedProcess[str]], masters: str,
             keys: range) -> None:
    for i in keys:
        got = revivify("row", "put", "--masters", masters, "--table", "t", f"key-{i:03d}",
                       f"value-{i}", "--json", "--deadline", "60")
        assert got.returncode == 0, (i, got.stderr)
