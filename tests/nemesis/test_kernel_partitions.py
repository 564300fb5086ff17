"""Kernel partitions (impl/testing/nemesis/netns.py): a cut really drops packets between two
server namespaces, in both directions, on new and established TCP connections, and never
between a client (the root namespace) and a server; healing restores the link; lifting one
cut leaves another pair's rules alone; close deletes everything the network made, and a new
network deletes the leftovers of a run that was SIGKILLed.

The kernel tests need root, ip and nft (skipped otherwise: the nemesis then runs with
``--partitions rpc``); the shapes of the partition kinds (TestShapes) are checked anywhere.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from revivify.impl.testing.nemesis import netns
from revivify.impl.testing.nemesis.cluster import Cluster
from revivify.impl.testing.nemesis.netns import KernelNetwork

kernel = pytest.mark.skipif(netns.unavailable() is not None,
                            reason=f"kernel partitions: {netns.unavailable()}")

PORT = 9000
# An echo server: every line received is sent back.
ECHO = f"""
import socket, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((HOST, {PORT}))
s.listen()
print("ready", flush=True)
def serve(c):
    with c:
        while data := c.recv(100):
            c.sendall(data)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""
# A client that connects (1 s timeout) and echoes one byte: exit 0 if it came back, 1 on a
# timeout (the packets vanished, as on a network), 3 on any other error (refused, or a
# local send failure: what a drop in the sender's own output hook looks like to its TCP).
PROBE = f"""
import socket, sys
try:
    with socket.create_connection((sys.argv[1], {PORT}), timeout=1.0) as c:
        c.sendall(b"x"); sys.exit(0 if c.recv(1) == b"x" else 2)
except TimeoutError:
    sys.exit(1)
except OSError:
    sys.exit(3)
"""


def everything() -> tuple[list[str], list[str], str]:
    """Namespaces, root links and the root's nft ruleset, as they are now."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    rules = subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True).stdout
    return (sorted(line.split()[0] for line in ns.splitlines() if line.strip()),
            sorted(line.split(":", 2)[1].strip().split("@")[0] for line in links.splitlines()),
            rules)


def state() -> tuple[list[str], list[str], str]:
    """What a network could leave behind, without the networks of nemesis runs: another
    test module (another xdist worker) may start and end runs meanwhile. A run's own names
    are checked by `names_of`."""
    ns, links, rules = everything()
    return ([n for n in ns if not n.startswith(netns.PREFIX)],
            [n for n in links if not n.startswith(netns.PREFIX)], rules)


def names_of(run_id: str) -> list[str]:
    """The namespaces and root links of run `run_id` that exist now."""
    ns, links, _ = everything()
    return [n for n in ns + links if n.startswith(f"{netns.PREFIX}{run_id}")]


def run_of(pid: int) -> str | None:
    """The id of the network process `pid` made (its state file), if any."""
    for entry in os.listdir(netns.STATE_DIR) if os.path.isdir(netns.STATE_DIR) else []:
        try:
            doc = json.loads(Path(netns.STATE_DIR, entry).read_text())
        except (OSError, ValueError):
            continue
        if doc.get("pid") == pid:
            return entry.removesuffix(".json")
    return None


@pytest.fixture
def net() -> Iterator[KernelNetwork]:
    network = KernelNetwork(["a", "b", "c"])
    servers = []
    try:
        for name in "abc":
            node = network.nodes[name]
            p = subprocess.Popen(["ip", "netns", "exec", node.netns, sys.executable, "-c",
                                  f"HOST = {node.host!r}\n{ECHO}"], stdout=subprocess.PIPE)
            servers.append(p)
            assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
        yield network
    finally:
        for p in servers:
            p.kill()
            p.wait()
        network.close()


def probe(net: KernelNetwork, src: str | None, dst: str) -> int:
    """A TCP connect + echo from node `src` (None: the root namespace, where the nemesis's
    clients run) to node `dst`: PROBE's exit code."""
    cmd = [sys.executable, "-c", PROBE, net.nodes[dst].host]
    if src is not None:
        cmd = ["ip", "netns", "exec", net.nodes[src].netns, *cmd]
    return subprocess.run(cmd, timeout=20).returncode


def reaches(net: KernelNetwork, src: str | None, dst: str) -> bool:
    return probe(net, src, dst) == 0


@kernel
def test_a_cut_drops_server_traffic_not_client_traffic(net: KernelNetwork) -> None:
    everyone = [(s, d) for s in "abc" for d in "abc" if s != d]
    assert all(reaches(net, s, d) for s, d in everyone)
    assert all(reaches(net, None, d) for d in "abc")
    # No server reaches another through the loopback: it has no port there.
    a = net.nodes["a"]
    probe_lo = subprocess.run(["ip", "netns", "exec", a.netns, sys.executable, "-c", PROBE,
                               "127.0.0.1"], timeout=20)
    assert probe_lo.returncode == 3  # refused: nothing listens there

    net.set_cuts([("a", "b")])
    # Across the cut the SYN vanishes: a timeout, not a local error (netns.py: why the
    # input hook).
    assert probe(net, "a", "b") == 1 and probe(net, "b", "a") == 1
    assert reaches(net, "a", "c") and reaches(net, "c", "b")  # c bridges
    assert all(reaches(net, None, d) for d in "abc")  # clients are never cut

    net.set_cuts([])
    assert reaches(net, "a", "b") and reaches(net, "b", "a")


@kernel
def test_an_established_connection_backs_off_as_on_a_network(net: KernelNetwork) -> None:
    """A connection opened before the cut, a byte sent every 0.1 s: nothing comes back
    during the cut (the connection is not reset), and after the heal the same connection
    delivers again, but only at TCP's next retransmission: its timer backed off during the
    cut (from 200 ms, doubling: retransmits about 0.2, 0.6, 1.4, 3.0, 6.2 s after the first
    loss), so after a 4 s cut the first echo comes about 2 s after the heal. A cut that
    dropped in the sender's own output hook would fail here: the sender's TCP would see a
    local send error and retry every 500 ms without backing off (netns.py)."""
    b = net.nodes["b"]
    script = f"""
import socket, sys, threading, time
c = socket.create_connection(({b.host!r}, {PORT}), timeout=5.0)
c.settimeout(None)  # blocking: a recv waits out the cut
def read():
    while c.recv(1):
        print(time.monotonic(), flush=True)
threading.Thread(target=read, daemon=True).start()
end = time.monotonic() + 30  # then exit: the test's readline sees EOF, never hangs
while time.monotonic() < end:
    c.sendall(b"y")
    time.sleep(0.1)
"""
    p = subprocess.Popen(["ip", "netns", "exec", net.nodes["a"].netns, sys.executable, "-c",
                          script], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    try:
        assert float(p.stdout.readline()) > 0  # echoes flow
        time.sleep(0.5)
        net.set_cuts([("a", "b")])
        cut = time.monotonic()
        time.sleep(4.0)
        net.set_cuts([])
        healed = time.monotonic()
        while (t := float(p.stdout.readline())) <= healed:
            # Echoes of bytes that crossed before the cut; none from inside it.
            assert t < cut + 0.3, (t - cut)
        delay = t - healed
        assert 1.0 < delay < 10.0, delay
    finally:
        p.kill()
        p.wait()


@kernel
def test_lifting_one_cut_leaves_the_others(net: KernelNetwork) -> None:
    net.set_cuts([("a", "b"), ("a", "c")])
    assert sorted(net.tables("a")) == ["inet cut_b", "inet cut_c"]
    assert net.tables("b") == ["inet cut_a"] and net.tables("c") == ["inet cut_a"]
    net.set_cuts([("c", "a")])  # the same pair in the other order: kept, not re-made
    assert net.tables("a") == ["inet cut_c"] and net.tables("b") == []
    assert net.tables("c") == ["inet cut_a"]
    assert reaches(net, "a", "b") and not reaches(net, "a", "c")


@kernel
def test_close_removes_everything() -> None:
    before = state()
    network = KernelNetwork(["x", "y"])
    network.set_cuts([("x", "y")])
    made = sorted(names_of(network.id))
    assert made == sorted([f"{netns.PREFIX}{network.id}-{n}" for n in ("hub", "x", "y")]
                          + [f"{netns.PREFIX}{network.id}r"])
    assert state() == before  # nothing else: the root's firewall is never touched
    assert os.path.exists(os.path.join(netns.STATE_DIR, f"{network.id}.json"))
    network.close()
    network.close()  # idempotent
    assert names_of(network.id) == [] and state() == before
    assert not os.path.exists(os.path.join(netns.STATE_DIR, f"{network.id}.json"))


@kernel
def test_a_new_network_removes_a_killed_runs_leftovers() -> None:
    before = state()
    child = subprocess.Popen(
        [sys.executable, "-c", "from revivify.impl.testing.nemesis.netns import "
         "KernelNetwork\nn = KernelNetwork(['p', 'q'])\nn.set_cuts([('p', 'q')])\n"
         "print(n.id, flush=True)\nimport time\ntime.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    run_id = child.stdout.readline().strip()
    assert len(run_id) == 4
    # A live run's network is never swept.
    assert not [x for x in netns.sweep() if run_id in x]
    assert f"{netns.PREFIX}{run_id}-p" in names_of(run_id)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert f"{netns.PREFIX}{run_id}-p" in names_of(run_id)  # no cleanup ran: leftovers
    network = KernelNetwork(["z"])
    try:
        assert f"netns {netns.PREFIX}{run_id}-p" in network.swept
        assert names_of(run_id) == []
    finally:
        network.close()
    assert state() == before


@kernel
def test_a_run_killed_by_sigterm_cleans_up(tmp_path: Path) -> None:
    """The nemesis itself: SIGTERM mid-run kills the servers and deletes the network."""
    before = state()
    p = subprocess.Popen([sys.executable, "-m", "revivify.impl.testing.nemesis", "--profile",
                          "short", "--seed", "1", "--workdir", str(tmp_path / "run")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.stdout is not None
    deadline = time.monotonic() + 120
    for line in p.stdout:  # wait until the workload runs: the servers are up
        if "faults planned" in line or time.monotonic() > deadline:
            break
    run_id = run_of(p.pid)
    # hub, 3 masters, 3 tablet servers (the short profile is a masters cluster), root link
    assert run_id is not None and len(names_of(run_id)) == 8
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=120)
    assert names_of(run_id) == [] and run_of(p.pid) is None
    assert state() == before


class TestShapes:
    """The cut pairs each partition kind makes (no process started: the rpc fallback's
    Cluster, whose cuts land in the fault file under the servers' UUIDs)."""

    def cluster(self, tmp_path: Path, masters: int, tservers: int) -> Cluster:
        c = Cluster(str(tmp_path), masters=masters, tserver_args=[], tservers=tservers,
                    partitions="rpc")
        for i, s in enumerate(c.servers):
            s.uuid = f"t{i}"
        for i, m in enumerate(c.masters.masters if c.masters else []):
            m.uuid = f"u{i}"
        return c

    def test_halves(self, tmp_path: Path) -> None:
        c = self.cluster(tmp_path, 3, 4)
        minority, majority = c.split(3)
        assert minority == ["ts3", "ts0", "m0"]
        assert sorted(majority) == ["m1", "m2", "ts1", "ts2"]
        assert len(c.cuts) == 3 * 4
        assert all((a in minority) != (b in minority) for a, b in c.cuts)
        c3 = self.cluster(tmp_path / "three", 0, 3)
        assert c3.split(1) == (["ts1"], ["ts0", "ts2"])

    def test_one_master_and_bridge_and_the_fault_file(self, tmp_path: Path) -> None:
        c = self.cluster(tmp_path, 3, 4)
        c.isolate_master(2)
        assert sorted(b for a, b in c.cuts) == ["m0", "m1", "ts0", "ts1", "ts2", "ts3"]
        assert all(a == "m2" for a, _ in c.cuts)
        c.cut_pair(0, 1)
        doc = json.loads(Path(c.fault_path).read_text())
        assert doc["cuts"] == [["t0", "t1"]]
        c.lift_faults()
        assert json.loads(Path(c.fault_path).read_text())["cuts"] == []
