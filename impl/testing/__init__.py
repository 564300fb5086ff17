"""Test doubles for revivify: a crash-simulating disk and an in-memory network.

What lives here and why
-----------------------
The real system reaches the outside world through two seams: storage writes through a
`Disk` (revivify.impl.storage.disk; `OsDisk` is the real one) and RPC gets its byte streams
from a `Network` (revivify.impl.rpc.transport; `TcpNetwork` is the real one). This package
holds the other implementation of each seam, the one deterministic tests run on:

    simdisk   SimDisk: an in-memory Disk whose crash keeps only what POSIX allows (what was
              fsynced, or any allowed subset of the unsynced operations, torn writes
              included); crash injection after N operations (SimulatedCrash), and
              explore_crashes, which crashes an operation at every point and checks every
              allowed outcome (ExplorationReport)
    memnet    MemoryNetwork: in-memory hosts (MemoryHost), listeners (MemoryListener) and
              streams (MemoryStream) with partitions, kills, drops (as connection resets)
              and link delays (LinkFaults), every fault recorded as a NetEvent

They are public and importable, in the manner of ``trio.testing``, so that the project's
own tests, benchmarks and later the demo can all use them, yet they are kept apart from the
production packages: nothing in revivify.impl outside this package imports it (an
import-linter contract in ``make lint`` enforces that), so a test double can never become a
hidden dependency of a server. This package may import production code (memnet builds on
the rpc transport seam), never the other way round.

How a test uses them
--------------------
Both doubles take their randomness from an injected seed and their time from trio, so a
test run under ``trio.testing.MockClock(autojump_threshold=0)`` is deterministic and
instant: whenever every task waits, the clock jumps to the next deadline. A test hands the
doubles to the same code that runs in production::

    import functools
    import random

    import trio
    import trio.testing

    from revivify.impl.rpc import open_rpc_client, serve_rpc
    from revivify.impl.storage.wal import LogOptions, open_log
    from revivify.impl.testing import MemoryNetwork, SimDisk

    async def main() -> None:
        disk = SimDisk()                          # storage code runs on it unchanged
        net = MemoryNetwork(random.Random(seed))  # all drops come from this seed
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(
                serve_rpc, service, "server-uuid", "ts-1", 7050, network=net.host("ts-1")))
            async with open_rpc_client("ts-1", 7050, "server-uuid", "me",
                                       network=net.host("client")) as client:
                ...
                net.partition(["client"], ["ts-1"])  # calls in flight: ConnectionClosed
            nursery.cancel_scope.cancel()
        survivor = disk.crash()                   # power loss: only what was fsynced

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

A WAL on a SimDisk should run with ``LogOptions(use_threads=False)``, so that every disk
call runs inline in the trio thread and the run stays deterministic. A SimDisk needs no
trio at all for synchronous storage code: ``explore_crashes(base.clone, operation, check)``
runs `operation` on a fresh clone, crashed before each of its mutating operations in turn,
and calls ``check(outcome, point)`` on every disk a crash there may leave behind.
"""

from revivify.impl.testing.memnet import (
    NO_FAULTS,
    LinkFaults,
    MemoryHost,
    MemoryListener,
    MemoryNetwork,
    MemoryStream,
    NetEvent,
    NetEventKind,
)
from revivify.impl.testing.raft import (
    DurableState,
    HarnessError,
    InvariantViolation,
    LivelockError,
    NodeDown,
    RaftCluster,
    RaftNode,
    ReadResult,
    SafetyChecker,
)
from revivify.impl.testing.simdisk import (
    ExplorationReport,
    SimDisk,
    SimFile,
    SimulatedCrash,
    explore_crashes,
)

__all__ = [
    "NO_FAULTS",
    "DurableState",
    "ExplorationReport",
    "HarnessError",
    "InvariantViolation",
    "LinkFaults",
    "LivelockError",
    "MemoryHost",
    "MemoryListener",
    "MemoryNetwork",
    "MemoryStream",
    "NetEvent",
    "NetEventKind",
    "NodeDown",
    "RaftCluster",
    "RaftNode",
    "ReadResult",
    "SafetyChecker",
    "SimDisk",
    "SimFile",
    "SimulatedCrash",
    "explore_crashes",
]
