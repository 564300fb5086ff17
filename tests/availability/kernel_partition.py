"""A network partition made by the kernel: nftables rules that drop loopback TCP packets.

`cut(ports)` drops, in the input hook, every TCP packet arriving on ``lo`` to or from one of
``ports`` (the RPC ports of the test's own servers, which it picked): the servers and
every client of them lose each other exactly as on a cut cable. Nothing is refused or
reset, so connections stay open and their retransmissions back off, which is the point
(issue 32); the kernel sees only dropped packets, no process is signalled.

The rules live in a table of their own, named after this process and a counter, so they
match nothing but this test's ports and can be removed at once whatever happens: the
context manager deletes the table on the way out, exception or not (and `heal` deletes it
earlier when the test wants the heal timed); a test process killed mid-partition leaves
its table behind, and the next `cut` deletes it (`sweep_stale`: a table of this helper's
naming whose process is gone). Other tables (Docker's, another engineer's)
are left alone: a drop in any base chain is final in nftables, whatever they accept.

Needs root and the ``nft`` binary (the Makefile installs nftables when it is missing);
`unavailable()` says why a test must be skipped when either is lacking.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from revivify.impl.processes.pids import signal_alive

_counter = itertools.count(1)


def unavailable() -> str | None:
    """Why kernel partitions cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "kernel partitions need root (nftables rules)"
    if shutil.which("nft") is None:
        return "kernel partitions need nft (make installs nftables)"
    probe = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True,
                           check=False)
    if probe.returncode != 0:
        return f"nft does not work here: {probe.stderr.strip()}"
    return None


def _nft(script: str) -> None:
    subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True,
                   capture_output=True)


class Partition:
    """The rules of one cut; `heal` removes them (idempotent)."""

    def __init__(self, ports: Sequence[int]) -> None:
        assert ports and all(0 < p < 65536 for p in ports), ports
        self.table = f"revivify_cut_{os.getpid()}_{next(_counter)}"
        self.ports = tuple(ports)
        self.active = False

    def apply(self) -> None:
        ports = ", ".join(str(p) for p in self.ports)
        _nft(f"""
table inet {self.table} {{
    chain input {{
        type filter hook input priority -10; policy accept;
        iifname "lo" tcp dport {{ {ports} }} drop
        iifname "lo" tcp sport {{ {ports} }} drop
    }}
}}
""")
        self.active = True

    def heal(self) -> None:
        if self.active:
            subprocess.run(["nft", "delete", "table", "inet", self.table],
                           capture_output=True, check=False)
            self.active = False

    def listed(self) -> bool:
        """Whether the table is in the kernel's ruleset (tests of this helper)."""
        out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True,
                             check=False).stdout
        return self.table in out.split()


def sweep_stale() -> list[str]:
    """Delete the tables of test processes that died before they could (SIGKILLed mid-
    partition): only tables named by this helper whose process is gone. Returns them."""
    out = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True,
                         check=False).stdout
    swept = []
    for name in out.split():
        m = re.fullmatch(r"revivify_cut_(\d+)_\d+", name)
        if m is None or int(m.group(1)) == os.getpid() or signal_alive(int(m.group(1))):
            continue
        subprocess.run(["nft", "delete", "table", "inet", name], capture_output=True,
                       check=False)
        swept.append(name)
    return swept



@contextmanager
def cut(ports: Sequence[int]) -> Iterator[Partition]:
    """Drop every loopback TCP packet to or from ``ports`` for the block (module
    docstring); the rules are removed when the block ends, however it ends."""
    sweep_stale()
    partition = Partition(ports)
    try:
        partition.apply()
        yield partition
    finally:
        partition.heal()
