"""A master process's settings (``revivify master run``'s flags, impl/servers/master.py) and
the one spelling of a master's address that the master list compares.

Plain values: every part of the master shell (server.py and the rooms it composes) reads
the settings it needs from here, and tests build them directly.
"""

from __future__ import annotations

import attrs

from revivify.impl.rpc.address import format_address, parse_address


@attrs.frozen
class MasterOptions:
    fs_root: str
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 0
    # The HOST:PORT the other masters, the tablet servers and clients reach this master at
    # (``--rpc-advertised-address``; "": the bind host and port): its entry in ``masters``
    # and in the catalog tablet's Raft config (ServerOptions.advertised_address).
    advertised_address: str = ""
    masters: tuple[str, ...] = ()  # every master's HOST:PORT, this one included; () = alone
    trace_dir: str | None = None
    tick_seconds: float = 0.05
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    fsync: bool = True
    seed: int | None = None
    dead_after: float = 3.0  # seconds without a heartbeat before a tablet server is dead
    background_seconds: float = 1.0
    creation_timeout: float = 60.0  # a tablet CREATING this long (under one leader) is replaced
    write_timeout: float = 10.0  # a catalog write not committed by then failed
    call_retry_seconds: float = 30.0
    call_timeout: float = 10.0
    # The healing policy (replication.py): a tablet server silent this long is failed and
    # its replicas are moved elsewhere (`master run --tserver-failed-after-ms`). A few
    # heartbeats' worth by default, for tests and demos; minutes in production.
    failed_after: float = 3.0
    heal: bool = True  # run the healing policy (moves, re-replication) in the background
    # A master that joins a running cluster (`master add`): it never creates the catalog,
    # the leader copies it here once this master is added to the catalog's config.
    join: bool = False
    # A ChangeConfig the policy sent is not sent again for the same tablet, config index and
    # leader for this long (its effect comes back in a report; the CAS fences the rest).
    change_backoff: float = 5.0
    threads: bool = True  # False: disk calls inline (the in-process clusters, MockClock)
    # Follower reads (follower_reads.py): a follower asks the leader for a read index this
    # often while it served follower reads in the last ``read_refresh_idle`` seconds, and
    # a read that finds the catalog too old waits at most ``read_wait_seconds`` for one.
    read_refresh_seconds: float = 0.25
    read_refresh_idle: float = 60.0
    read_wait_seconds: float = 1.0
    # The catalog tablet's flush and WAL retention, as a tablet server's (ServerOptions):
    # small values let a test GC the catalog's WAL (a joining master then needs a copy of
    # the flushed catalog, not a replay of the log from its first entry).
    flush_threshold: int = 8 << 20
    log_retain_entries: int = 50_000
    # Prometheus metrics (as ServerOptions): off replaces every family with a no-op.
    metrics: bool = True
    metrics_per_tablet: bool = False

    def __attrs_post_init__(self) -> None:
        # One notion of a dead server (README "The cluster heals itself"): the policy
        # moves replicas off a server silent longer than failed_after, and 'tserver list'
        # and ksck call it DEAD after dead_after; both measure from the same last heartbeat
        # on the same clock, so failed_after >= dead_after means no move before DEAD.
        if self.failed_after < self.dead_after:
            raise ValueError(f"failed_after {self.failed_after:g}s is below dead_after "
                             f"{self.dead_after:g}s: replicas would move off a server "
                             f"before it is listed dead")


def normalize(address: str) -> str:
    """``address`` as HOST:PORT in the one form the master list compares (ValueError if
    it is not an address)."""
    host, port = parse_address(address)
    return format_address(host, port)


__all__ = ["MasterOptions", "normalize"]
