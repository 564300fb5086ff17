"""Partitions in the kernel: every server process in a network namespace of its own, a cut
is nftables DROP rules inside the namespaces of the two servers it separates.

Topology of one run (its names all begin with ``rvnem<id>``, ``id`` four hex digits)::

    root namespace (the nemesis, its clients, the CLI)
      rvnem<id>r  10.A.B.254/24 ──veth── up0 ┐
                                             ├─ br0 (a bridge, in namespace rvnem<id>-hub)
      rvnem<id>-ts0: eth0 10.A.B.1/24 ─veth─ ┤
      rvnem<id>-ts1: eth0 10.A.B.2/24 ─veth─ ┤   ... one namespace per server
      rvnem<id>-m0:  eth0 10.A.B.k/24 ─veth─ ┘

Why the bridge lives in a namespace of its own (the "hub"): when br_netfilter is loaded
(Docker loads it) bridged frames traverse the iptables FORWARD chain of the bridge's
namespace, whose policy on a Docker host is DROP. The hub's netfilter is empty, so the
servers' frames never meet the host's rules; the root namespace gains one veth and one
route to a /24 that no route of the host overlaps (checked when the subnet is chosen), and
nothing else. Each server binds its namespace's address, the only non-loopback address it
has, so no server reaches another through 127.0.0.1; the clients in the root namespace
reach every server over the bridge, and no cut names them. A network made with
``root=False`` has no root veth: the root namespace is not touched at all, and only
processes run inside the namespaces (``command``) reach the servers (tests/hosts).

A cut between servers a and b: in a's namespace a table ``inet cut_<b>`` drops every packet
arriving from b's address (the input hook), and the mirror table in b's namespace drops
every packet from a: each direction is dropped at its receiver. Each cut pair is its own
two tables, created and deleted alone, so lifting one cut never touches another pair's
rules. Why the input hook and never output: a packet dropped in the sender's own output
hook is a LOCAL send failure to its TCP (the transmit returns an error), and Linux then
retries every 500 ms (TCP_RESOURCE_PROBE_INTERVAL) without backing off, and fails a
connect() at once: nothing like a network. Dropped on arrival, the packet left the sender
as on a real wire and vanished, so the sender's TCP does what it does on a switch that lost
the link: an established connection stays established and retransmits with exponential
back-off (so it may deliver again only seconds after the heal), a new connection
retransmits its SYN (1, 2, 4, 8 ... s apart).

Cleanup: deleting a namespace deletes its veth end (and so the peer end), its addresses
and its tables; the hub's deletion takes the bridge and the root veth's peer. ``close``
deletes every namespace of the run and the root veth. A run records itself in
``STATE_DIR/<id>.json`` (pid and start time) BEFORE creating anything, and removes the file
after deleting everything; ``sweep`` (every new network calls it) deletes whatever carries
the prefix and belongs to no live run: the leftovers of a run that was SIGKILLed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from revivify.impl.processes.control import Placement, pid_alive, process_start_ticks

PREFIX: Final = "rvnem"
STATE_DIR: Final = "/run/revivify-nemesis"
ROOT_HOST: Final = 254  # the root namespace's address on the bridge: 10.A.B.254
_TIMEOUT: Final = 20.0


class NetworkError(Exception):
    pass


def unavailable() -> str | None:
    """Why kernel partitions cannot be made here (None when they can): root, ip and nft."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (install iproute2 / nftables)"
    return None


def _run(cmd: Sequence[str], *, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(list(cmd), input=stdin, capture_output=True, text=True,
                          timeout=_TIMEOUT, check=False)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(cmd)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _ip(*args: str, check: bool = True) -> str:
    return _run(["ip", *args], check=check)


def _table(peer: str) -> str:
    """The nft table, in one server's namespace, that cuts it from server `peer`."""
    return f"cut_{peer}"


def _namespaces() -> list[str]:
    # `ip netns list` prints "name" or "name (id: N)".
    return [line.split()[0] for line in _ip("netns", "list").splitlines() if line.strip()]


def _links() -> list[str]:
    out = []
    for line in _ip("-o", "link", "show").splitlines():
        # "7: rvnem1a2br@if6: <...>": the name ends at '@' or ':'.
        name = line.split(":", 2)[1].strip().split("@")[0]
        out.append(name)
    return out


_HEX: Final = frozenset("0123456789abcdef")


def _run_id(name: str) -> str | None:
    """The run id in a name this module made (PREFIX, four hex digits, then "r" or "-..."),
    None for any other name."""
    rid = name[len(PREFIX):len(PREFIX) + 4]
    rest = name[len(PREFIX) + 4:]
    if name.startswith(PREFIX) and len(rid) == 4 and set(rid) <= _HEX \
            and (rest == "r" or rest.startswith("-")):
        return rid
    return None


def _live(run_id: str) -> bool:
    """Whether the run `run_id` still runs (its state file names a live process)."""
    try:
        with open(os.path.join(STATE_DIR, f"{run_id}.json"), encoding="utf-8") as f:
            doc = json.load(f)
        return pid_alive(int(doc["pid"]), int(doc["start_ticks"]))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def sweep() -> list[str]:
    """Delete every namespace and link with the prefix whose run is gone, and the state
    files of dead runs; what was deleted. A live run's network is never touched."""
    removed: list[str] = []
    for ns in _namespaces():
        rid = _run_id(ns)
        if rid is not None and not _live(rid):
            _ip("netns", "delete", ns, check=False)
            removed.append(f"netns {ns}")
    for link in _links():
        rid = _run_id(link)
        if rid is not None and not _live(rid):
            _ip("link", "delete", link, check=False)
            removed.append(f"link {link}")
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(STATE_DIR):
            rid = entry.removesuffix(".json")
            if not _live(rid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(STATE_DIR, entry))
                removed.append(f"state {entry}")
    return removed


def _taken_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the root namespace routes, and those of live runs."""
    nets = []
    for line in _ip("-4", "route", "show", "table", "all").splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast", "unreachable", "blackhole", "prohibit", "throw"):
            word = line.split()[1]
        if word == "default":
            continue
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.IPv4Network(word, strict=False))
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(STATE_DIR):
            with contextlib.suppress(OSError, ValueError, KeyError), \
                    open(os.path.join(STATE_DIR, entry), encoding="utf-8") as f:
                nets.append(ipaddress.IPv4Network(json.load(f)["subnet"]))
    return nets


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0/13 that overlaps no route of this machine and no live run."""
    taken = _taken_networks()
    for _ in range(256):
        a, b = 200 + secrets.randbelow(8), secrets.randbelow(256)
        net = ipaddress.IPv4Network(f"10.{a}.{b}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise NetworkError("no free /24 in 10.200.0.0/13 for the run's bridge")


@attrs.frozen
class Node:
    """One server's place: its name in the run (``ts0``, ``m1``), namespace and address."""

    name: str
    netns: str
    host: str

    @property
    def placement(self) -> Placement:
        return Placement(self.host, self.netns)


class KernelNetwork:
    """The network of one run (module docstring). Nodes are named by the caller."""

    def __init__(self, names: Sequence[str], *, root: bool = True) -> None:
        """``root=False``: no veth into the root namespace, whose links, addresses and
        routes are then left untouched (tests/hosts, whose client runs in a namespace of
        its own); only the namespaces reach the servers."""
        assert len(set(names)) == len(names) and len(names) < ROOT_HOST - 1, names
        problem = unavailable()
        if problem is not None:
            raise NetworkError(f"kernel partitions need root, ip and nft: {problem}")
        self.swept = sweep()
        os.makedirs(STATE_DIR, exist_ok=True)
        while True:
            self.id = secrets.token_hex(2)
            state = os.path.join(STATE_DIR, f"{self.id}.json")
            if not os.path.exists(state) and not any(
                    _run_id(n) == self.id for n in _namespaces() + _links()):
                break
        self.subnet = _free_subnet()
        pid = os.getpid()
        with open(state, "w", encoding="utf-8") as f:
            json.dump({"pid": pid, "start_ticks": process_start_ticks(pid) or 0,
                       "subnet": str(self.subnet)}, f)
        self._state = state
        self.hub = f"{PREFIX}{self.id}-hub"
        self.root_link = f"{PREFIX}{self.id}r"
        hosts = list(self.subnet.hosts())
        self.nodes = {n: Node(n, f"{PREFIX}{self.id}-{n}", str(hosts[i]))
                      for i, n in enumerate(names)}
        self.root_host = str(hosts[ROOT_HOST - 1])
        self.root = root
        self.cuts: set[frozenset[str]] = set()
        self.closed = False
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        hub = self.hub
        prefixlen = str(self.subnet.prefixlen)
        _ip("netns", "add", hub)
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "link", "set", "br0", "up")
        if self.root:
            _ip("link", "add", self.root_link, "type", "veth", "peer", "name", "up0",
                "netns", hub)
            _ip("addr", "add", f"{self.root_host}/{prefixlen}", "dev", self.root_link)
            _ip("link", "set", self.root_link, "up")
            _ip("-n", hub, "link", "set", "up0", "master", "br0", "up")
        for i, node in enumerate(self.nodes.values()):
            port = f"p{i}"
            _ip("netns", "add", node.netns)
            _ip("link", "add", "eth0", "netns", node.netns, "type", "veth", "peer", "name",
                port, "netns", hub)
            _ip("-n", node.netns, "addr", "add", f"{node.host}/{prefixlen}", "dev", "eth0")
            _ip("-n", node.netns, "link", "set", "lo", "up")
            _ip("-n", node.netns, "link", "set", "eth0", "up")
            _ip("-n", hub, "link", "set", port, "master", "br0", "up")

    def placement(self, name: str, *, wildcard: bool = False) -> Placement:
        """Where node `name`'s server runs; ``wildcard``: it binds 0.0.0.0 and advertises
        the node's address (Placement)."""
        node = self.nodes[name]
        return Placement(node.host, node.netns, wildcard)

    def command(self, name: str, cmd: Sequence[str]) -> list[str]:
        """``cmd`` as run inside node `name`'s namespace (a client on a "host" of its
        own: tests/hosts)."""
        return ["ip", "netns", "exec", self.nodes[name].netns, *cmd]

    def connects(self, name: str, host: str, port: int, seconds: float = 2.0) -> bool:
        """Whether a TCP connect from inside node `name`'s namespace to HOST:PORT completes
        within ``seconds`` (refused, unreachable or timed out: False). A probe of which
        servers one "host" can reach: its own loopback reaches no other namespace."""
        probe = ("import socket,sys\n"
                 "try:\n"
                 f"    socket.create_connection(({host!r}, {port}), timeout={seconds}).close()\n"
                 "except OSError:\n"
                 "    sys.exit(1)\n")
        done = subprocess.run(self.command(name, [sys.executable, "-c", probe]),
                              capture_output=True, text=True, timeout=_TIMEOUT + seconds,
                              check=False)
        if done.returncode not in (0, 1):
            raise NetworkError(f"probe in {name}: exit {done.returncode}: "
                               f"{done.stderr.strip()}")
        return done.returncode == 0

    # ------------------------------------------------------------------ cuts

    def set_cuts(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Make the cuts in force exactly `pairs` (node names, either order): the pairs no
        longer wanted are lifted and the new ones made, each pair's tables alone."""
        want = {frozenset(p) for p in pairs}
        assert all(len(p) == 2 and p <= self.nodes.keys() for p in want), want
        lift, make = self.cuts - want, want - self.cuts
        # One nft script per namespace: every table to delete, then every table to add.
        scripts: dict[str, list[str]] = {}
        for pair in lift:
            for me, peer in _sides(pair):
                scripts.setdefault(me, []).append(f"delete table inet {_table(peer)}")
        for pair in make:
            for me, peer in _sides(pair):
                addr = self.nodes[peer].host
                # The input hook only: see the module docstring (why not output).
                scripts.setdefault(me, []).append(
                    f"table inet {_table(peer)} {{\n"
                    f"  chain input {{ type filter hook input priority 0; policy accept;\n"
                    f"    ip saddr {addr} drop\n  }}\n}}")
        for me, lines in sorted(scripts.items()):
            self.nft(me, "\n".join(lines) + "\n")
        self.cuts = want

    def nft(self, name: str, script: str) -> None:
        """Run an nft script inside node `name`'s namespace (atomically: one transaction)."""
        _run(["ip", "netns", "exec", self.nodes[name].netns, "nft", "-f", "-"], stdin=script)

    def tables(self, name: str) -> list[str]:
        """The nft tables in node `name`'s namespace (``inet cut_ts1``, ...)."""
        out = _run(["ip", "netns", "exec", self.nodes[name].netns, "nft", "list", "tables"])
        return [line.removeprefix("table ").strip() for line in out.splitlines() if line]

    # ------------------------------------------------------------------ cleanup

    def names(self) -> list[str]:
        """Every namespace and root link of this run that exists now."""
        mine = [n for n in _namespaces() + _links() if _run_id(n) == self.id]
        return sorted(mine)

    def close(self) -> None:
        """Delete every namespace, link and state file of the run (idempotent). Processes
        still inside a namespace keep it alive, unnamed, until they exit: kill them first."""
        if self.closed:
            return
        self.closed = True
        self.cuts = set()
        for n in self.names():
            if n == self.root_link:
                _ip("link", "delete", n, check=False)
            else:
                _ip("netns", "delete", n, check=False)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._state)


def _sides(pair: frozenset[str]) -> list[tuple[str, str]]:
    a, b = sorted(pair)
    return [(a, b), (b, a)]


__all__ = ["PREFIX", "STATE_DIR", "KernelNetwork", "NetworkError", "Node", "sweep",
           "unavailable"]
