"""Profiles and the seeded fault schedule: what the nemesis does, and when (no I/O).

The schedule is a pure function of (profile, seed): the same seed gives the same faults, in
the same order, at the same offsets, on the same server indexes, held for the same time.
One thing is resolved only at run time: a fault aimed at "the leader" (TARGET_LEADER) hits
whichever server leads the tablet when it fires.

Faults run one at a time: inject, hold, heal, a quiet gap, the next. One server at a time is
affected (a bridge cuts one pair of servers; a flap cuts one server off and heals it every
FLAP_SECONDS during the hold; halves cut a minority of the servers from the majority, so
that a majority of every tablet's replicas and of the masters is on one side), so a majority
of the tablet's 3 replicas can always make progress, and the availability target (issue 20:
with one server paused or cut off, successful operations continue) is measurable per fault.
The exception is ``power-loss-all``: every tablet server at once, so nothing is available
until they are back (not a stall: the target does not apply), and what survives is only what
was fsynced.

Every server of a nemesis run writes through the lazy disk (impl/storage/lazy.py: unsynced
contents live in the process), so every ``kill`` is a power loss of that server, not merely
a process crash: a write acknowledged before its fsync is lost with it.
"""

from __future__ import annotations

import random
from typing import Final

import attrs

KILL: Final = "kill"                        # SIGKILL, restarted when healed
PAUSE: Final = "pause"                      # SIGSTOP, SIGCONT when healed
PARTITION_ONE: Final = "partition-one"      # one server cut from every other server
PARTITION_LEADER: Final = "partition-leader"  # the leader cut from every other server
PARTITION_BRIDGE: Final = "partition-bridge"  # two servers cut from each other, the third sees both
PARTITION_HALVES: Final = "partition-halves"  # a minority of the servers cut from the majority
PARTITION_FLAP: Final = "partition-flap"    # one server cut off and healed every ~1 s
DISK_WAL_FSYNC: Final = "disk-wal-fsync"    # EIO on every fsync under FS_ROOT/wals/
DISK_DATA_WRITE: Final = "disk-data-write"  # EIO on every write under FS_ROOT/data/
DISK_FULL: Final = "disk-full"              # ENOSPC on every write under FS_ROOT/
POWER_LOSS_ALL: Final = "power-loss-all"    # every tablet server's power cut at once
# Masters under fire (profiles with masters): the target is a master's index, or the ready
# leader master (TARGET_LEADER) half of the time.
MASTER_KILL: Final = "master-kill"          # SIGKILL a master, restarted when healed
MASTER_PAUSE: Final = "master-pause"        # SIGSTOP a master, SIGCONT when healed
MASTER_PARTITION: Final = "master-partition"  # a master cut from every other server
# Two faults at once.
KILL_TWO: Final = "kill-two"                # two tablet servers killed (target, target + 1)
MASTER_AND_TSERVER: Final = "master-and-tserver"  # a master and a tablet server killed
ALL_DOWN: Final = "all-down"                # every master and tablet server killed, then back
# The servers' clocks (impl/faultfile.py FaultClock: trio's clock in the server, so every timeout it
# has): the target is a server of all (tablet servers first, then masters).
CLOCK_JUMP: Final = "clock-jump"            # the clock jumps CLOCK_JUMP_SECONDS ahead
CLOCK_FAST: Final = "clock-fast"            # the clock runs CLOCK_RATE x fast, then 1x
CLOCKS: Final = frozenset({CLOCK_JUMP, CLOCK_FAST})
CLOCK_JUMP_SECONDS: Final = 4.0  # past an election timeout and the masters' dead_after (3 s)
CLOCK_RATE: Final = 2.0

PARTITIONS: Final = frozenset({PARTITION_ONE, PARTITION_LEADER, PARTITION_BRIDGE,
                              PARTITION_HALVES, PARTITION_FLAP, MASTER_PARTITION})
"""Faults that cut servers from servers (in the kernel or the RPC layer: cluster.py)."""
FLAP_SECONDS: Final = 1.0  # partition-flap: a cut applied, then lifted, each this long

KINDS: Final = (KILL, PAUSE, PARTITION_ONE, PARTITION_LEADER, PARTITION_BRIDGE,
                PARTITION_HALVES, PARTITION_FLAP, DISK_WAL_FSYNC, DISK_DATA_WRITE, DISK_FULL,
                POWER_LOSS_ALL)
MASTER_KINDS: Final = (MASTER_KILL, MASTER_PAUSE, MASTER_PARTITION, MASTER_AND_TSERVER,
                       ALL_DOWN)
STALLS: Final = frozenset({PAUSE, PARTITION_ONE, PARTITION_LEADER, PARTITION_BRIDGE,
                           MASTER_PAUSE, MASTER_PARTITION})
"""Faults the availability target is measured over: one server paused or cut off, so a
majority of every tablet and of the masters stays up and connected (a client that knows a
tablet's leader keeps writing while the leader master is paused)."""
DISK: Final = frozenset({DISK_WAL_FSYNC, DISK_DATA_WRITE, DISK_FULL})

TARGET_LEADER: Final = -1


@attrs.frozen
class Profile:
    """A run's shape: how long, which faults, how many clients."""

    name: str
    duration: float  # seconds of workload under faults
    kinds: tuple[str, ...]
    # Every kind in `kinds` once (shuffled by the seed), then random kinds until `duration`.
    register_clients: int = 3
    map_clients: int = 3
    map_keys: int = 5
    masters: int = 0  # 0: tablet servers alone (a tablet made by Admin.CreateTablet)
    tservers: int = 3
    tablets: int = 1  # the workload's table (with masters; 3 replicas each)
    ddl: bool = False  # with masters: tables created, altered, deleted all along (the CLI)
    cli_clients: int = 0  # map clients that run one 'revivify row' process per operation
    quiet: float = 2.0  # seconds of workload before the first fault
    hold: tuple[float, float] = (2.0, 4.0)  # a fault lasts this long (uniform)
    # A partition's hold (uniform; None: `hold`). Jepsen holds partitions for seconds to a
    # minute; long ones let TCP's retransmission back-off grow (to ~10 s and more by the
    # heal), short ones catch elections racing the heal.
    partition_hold: tuple[float, float] | None = None
    gap: tuple[float, float] = (1.0, 3.0)  # quiet between a heal and the next fault
    op_deadline: float = 6.0  # seconds an operation may take before it is given up
    # Every kind exactly once, in the seed's order, however long that takes (`duration` is
    # then the least time of workload): the fast form, where each kind must be exercised.
    once: bool = False
    # The masters' own faults aim at the ready leader master (else: leader or a follower,
    # half and half).
    master_leader: bool = False
    # After each fault, once healed: ksck healthy within CATCH_UP_SECONDS and the histories
    # so far linearizable, or the run fails (else: ksck only paces the next fault).
    check_each: bool = False


PROFILES: Final = {
    # make test: a small cluster with masters (3 masters, 3 tablet servers, one tablet),
    # three faults once each: the tablet's leader cut off, the leader master killed (-9)
    # and restarted, every tablet server's power cut; each followed by the checks.
    "short": Profile("short", 14.0, (PARTITION_LEADER, MASTER_KILL, POWER_LOSS_ALL),
                     masters=3, tservers=3, tablets=1, once=True, master_leader=True,
                     check_each=True, hold=(2.0, 3.0), gap=(1.0, 1.5)),
    # make nemesis: every kind of fault, tablet servers alone.
    "standard": Profile("standard", 120.0, KINDS, partition_hold=(1.0, 20.0)),
    # the cluster: 3 masters, 4 tablet servers, a table of 4 tablets (so kills make the
    # masters re-replicate), DDL all along, the masters under fire, two faults at once,
    # power cuts; library and CLI clients.
    "masters": Profile("masters", 120.0, (
        KILL, PAUSE, PARTITION_ONE, PARTITION_LEADER, PARTITION_BRIDGE, PARTITION_HALVES,
        PARTITION_FLAP, POWER_LOSS_ALL, KILL_TWO, *MASTER_KINDS, CLOCK_JUMP, CLOCK_FAST),
        masters=3, tservers=4,
        tablets=4, ddl=True, cli_clients=1, hold=(2.0, 6.0), partition_hold=(1.0, 10.0),
        gap=(2.0, 4.0), op_deadline=10.0),
    # disk faults only.
    "disk": Profile("disk", 60.0, tuple(sorted(DISK))),
    # power cuts (of one server, of all) between kills and pauses.
    "power": Profile("power", 120.0, (KILL, POWER_LOSS_ALL, PAUSE, PARTITION_ONE)),
}
MAX_HOLD: Final = 60.0
assert all(max(p.partition_hold or p.hold) <= MAX_HOLD for p in PROFILES.values())


@attrs.frozen
class Fault:
    """One planned fault: `kind` at `at` seconds after the workload began, on server
    `target` (an index; TARGET_LEADER: the leader then; for a bridge, the bridging server),
    healed `hold` seconds later."""

    at: float
    kind: str
    target: int
    hold: float


def schedule(profile: Profile, seed: int, servers: int | None = None) -> list[Fault]:
    """The faults of a run of `profile` with `seed` (module docstring)."""
    servers = profile.tservers if servers is None else servers
    assert servers >= 3, "one server at a time must leave a majority of 3"
    rng = random.Random(f"nemesis:{profile.name}:{seed}")
    first = list(profile.kinds)
    rng.shuffle(first)
    faults: list[Fault] = []
    t = profile.quiet
    while True:
        if profile.once and not first:
            break
        kind = first.pop(0) if first else rng.choice(profile.kinds)
        holds = profile.partition_hold if kind in PARTITIONS and profile.partition_hold \
            else profile.hold
        hold = round(rng.uniform(*holds), 2)
        target = _target(kind, rng, servers, profile.masters, profile.master_leader)
        if t + hold > profile.duration and faults and not profile.once:
            break
        faults.append(Fault(round(t, 2), kind, target, hold))
        t += hold + round(rng.uniform(*profile.gap), 2)
        if t >= profile.duration and not profile.once:
            break
    return faults


def _target(kind: str, rng: random.Random, servers: int, masters: int,
            master_leader: bool) -> int:
    """A fault's target: a tablet server's index; for the masters' kinds a master's index
    or TARGET_LEADER (the ready leader master when it fires), half and half (always the
    leader with `master_leader`); for a clock, an index over the tablet servers then the
    masters."""
    if kind == PARTITION_LEADER:
        return TARGET_LEADER
    if kind in CLOCKS:
        return rng.randrange(servers + masters)
    if kind in (MASTER_KILL, MASTER_PAUSE, MASTER_PARTITION):
        return (TARGET_LEADER if master_leader or rng.random() < 0.5
                else rng.randrange(masters))
    return rng.randrange(servers)


__all__ = ["ALL_DOWN", "CLOCKS", "CLOCK_FAST", "CLOCK_JUMP", "CLOCK_JUMP_SECONDS",
           "CLOCK_RATE", "DISK", "FLAP_SECONDS", "KILL_TWO", "KINDS", "MASTER_AND_TSERVER",
           "MASTER_KILL", "MASTER_KINDS", "MASTER_PARTITION", "MASTER_PAUSE", "MAX_HOLD",
           "PARTITIONS", "PARTITION_FLAP", "PARTITION_HALVES", "POWER_LOSS_ALL", "PROFILES",
           "STALLS", "TARGET_LEADER", "Fault", "Profile", "schedule"]
