"""Tablet servers as real processes on 127.0.0.1: replication, crashes, restarts, membership.

Each test starts its own cluster (impl/processes/tservers.py) in a temporary directory, drives
it through the RPC interface, and ends by checking every trace the servers wrote against the
spec (``assert_traces_clean``). Election timeouts are the defaults (50 ms ticks, 10-20 ticks).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from revivify.impl.consensus.messages import AppendRequest, ConfigChange, Peer
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import MalformedRequest, WrongServerUuid
from revivify.impl.tablet.ops import RowOp
from revivify.impl.tserver import api

from .helpers import (
    Writer,
    assert_acked_readable,
    assert_traces_clean,
    call,
    create_tablet,
    discover_uuid,
    leader,
    run,
    state,
    wait_for,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def cluster(tmp_path: object) -> Iterator[ProcessCluster]:
    with ProcessCluster(str(tmp_path), 3) as c:
        c.start_all()
        yield c


def write_rows(cluster: ProcessCluster, tablet: str, n: int, clients: int = 16,
               prefix: str = "k") -> dict[bytes, bytes | None]:
    """n single-row puts from `clients` concurrent writers; returns what was acknowledged."""
    writers = [Writer(cluster, tablet, f"{prefix}-client-{c}") for c in range(clients)]

    async def main() -> None:
        async def lane(w: Writer, c: int) -> None:
            for i in range(c, n, clients):
                key = f"{prefix}{i:06d}".encode()
                await w.write([RowOp("put", key, b"v" * 64 + key)])
        async with trio.open_nursery() as nursery:
            for c, w in enumerate(writers):
                nursery.start_soon(lane, w, c)

    run(main, seconds=120)
    acked: dict[bytes, bytes | None] = {}
    for w in writers:
        acked.update(w.acked)
    return acked


def test_three_servers_replicate_1000_writes(cluster: ProcessCluster) -> None:
    create_tablet(cluster, "t1")
    lead = leader(cluster, "t1")
    acked = write_rows(cluster, "t1", 1000)
    assert len(acked) == 1000
    assert_acked_readable(cluster, "t1", acked)
    leader_state = state(cluster, lead, "t1")
    # Followers learn the commit index from heartbeats: every replica converges.
    for i in range(3):
        def applied(i: int = i) -> bool:
            return state(cluster, i, "t1").applied_index >= leader_state.commit_index

        wait_for(applied, 20, f"replica {i} to apply up to {leader_state.commit_index}")
    for i in range(3):
        assert cluster.stop(i) == 0
    assert_traces_clean(cluster)


def test_kill_leader_new_leader_keeps_every_acknowledged_write(cluster: ProcessCluster) -> None:
    create_tablet(cluster, "t1")
    old = leader(cluster, "t1")
    acked = write_rows(cluster, "t1", 300)
    old_term = state(cluster, old, "t1").term
    cluster.kill(old)
    t0 = time.monotonic()
    new = leader(cluster, "t1", among=[i for i in range(3) if i != old])
    elapsed = time.monotonic() - t0
    assert new != old
    assert state(cluster, new, "t1").term > old_term
    # A generous functional bound (the benchmark measures failover time properly).
    assert elapsed < 15, f"no new leader within {elapsed:.1f}s"
    acked.update(write_rows(cluster, "t1", 200, prefix="after"))
    assert_acked_readable(cluster, "t1", acked)
    cluster.start(old)  # the old leader rejoins as a follower
    wait_for(lambda: state(cluster, old, "t1").role == "FOLLOWER", 20, "old leader to follow")
    assert_acked_readable(cluster, "t1", acked)
    for i in range(3):
        cluster.stop(i)
    assert_traces_clean(cluster)


def test_all_killed_and_restarted_same_data(cluster: ProcessCluster) -> None:
    create_tablet(cluster, "t1")
    leader(cluster, "t1")
    acked = write_rows(cluster, "t1", 400)
    for i in range(3):
        cluster.kill(i)
    cluster.start_all()
    leader(cluster, "t1")
    assert_acked_readable(cluster, "t1", acked)
    acked.update(write_rows(cluster, "t1", 50, prefix="again"))
    assert_acked_readable(cluster, "t1", acked)
    for i in range(3):
        cluster.stop(i)
    assert_traces_clean(cluster)


def test_stopped_follower_catches_up(cluster: ProcessCluster) -> None:
    create_tablet(cluster, "t1")
    lead = leader(cluster, "t1")
    follower = (lead + 1) % 3
    cluster.stop(follower)
    acked = write_rows(cluster, "t1", 300)
    cluster.start(follower)
    target = state(cluster, lead, "t1").last_opid
    wait_for(lambda: tuple(state(cluster, follower, "t1").last_opid) >= tuple(target), 30,
             f"the follower to catch up to {target}")
    # Only the caught-up follower and the leader: the data is all there.
    other = 3 - lead - follower
    cluster.stop(other)
    assert_acked_readable(cluster, "t1", acked)
    for i in range(3):
        cluster.stop(i)
    assert_traces_clean(cluster)


def test_non_voter_added_caught_up_and_promoted(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 4) as c:
        c.start_all()
        peers = create_tablet(c, "t1", members=[0, 1, 2])
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 200)
        new = Peer(c.servers[3].uuid, c.servers[3].address, "NON_VOTER", promote=True)
        # Server 3 has no replica: the leader hears TabletNotFound and copies the tablet to
        # it, then replicates the rest of the log and promotes it.
        assert peers
        cas = state(c, lead, "t1").config_index
        s = c.servers[lead]
        index = call(s.address, s.uuid, api.ADMIN_CHANGE_CONFIG,
                     api.ChangeConfig("t1", ConfigChange("ADD", new), cas),
                     api.ConfigChanged).config_index
        assert index > cas

        def promoted() -> bool:
            info = state(c, lead, "t1")
            p = next((p for p in info.peers if p.uuid == new.uuid), None)
            return p is not None and p.member_type == "VOTER" and info.config_index > index
        wait_for(promoted, 30, "the NON_VOTER to be promoted")
        wait_for(lambda: state(c, 3, "t1").member_type == "VOTER", 30,
                 "the new replica to see itself as a voter")
        assert_acked_readable(c, "t1", acked)
        for i in range(4):
            c.stop(i)
        assert_traces_clean(c)


def test_remove_with_stale_cas_is_refused_then_done(cluster: ProcessCluster) -> None:
    create_tablet(cluster, "t1")
    lead = leader(cluster, "t1")
    s = cluster.servers[lead]
    victim = cluster.servers[(lead + 1) % 3]
    cas = state(cluster, lead, "t1").config_index
    with pytest.raises(api.ConfigChangeRefused) as refused:
        call(s.address, s.uuid, api.ADMIN_CHANGE_CONFIG,
             api.ChangeConfig("t1", ConfigChange("REMOVE", Peer(victim.uuid, "")), cas + 7),
             api.ConfigChanged)
    assert refused.value.reason == "CAS_MISMATCH"
    assert refused.value.committed_index == cas
    index = call(s.address, s.uuid, api.ADMIN_CHANGE_CONFIG,
                 api.ChangeConfig("t1", ConfigChange("REMOVE", Peer(victim.uuid, "")), cas),
                 api.ConfigChanged).config_index
    info = state(cluster, lead, "t1")
    assert info.config_index == index
    assert victim.uuid not in [p.uuid for p in info.peers]
    acked = write_rows(cluster, "t1", 50)
    assert_acked_readable(cluster, "t1", acked)
    for i in range(3):
        cluster.stop(i)
    assert_traces_clean(cluster)


def test_bad_requests_get_clear_errors_and_the_server_keeps_serving(
        cluster: ProcessCluster) -> None:
    create_tablet(cluster, "t1")
    lead = leader(cluster, "t1")
    s = cluster.servers[lead]
    assert discover_uuid(s.address) == s.uuid
    # The wrong UUID: refused, naming both.
    with pytest.raises(WrongServerUuid) as wrong:
        call(s.address, "0" * 32, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    assert wrong.value.expected == s.uuid
    # A body of the wrong shape: MalformedRequest naming the field.
    with pytest.raises(MalformedRequest):
        call(s.address, s.uuid, api.DATA_READ, api.TabletRef("t1"), api.ReadResult)
    with pytest.raises(api.TabletNotFound):
        call(s.address, s.uuid, api.DATA_READ, api.Read("nope", b"k"), api.ReadResult)
    with pytest.raises(api.InvalidArgument):
        call(s.address, s.uuid, api.ADMIN_CREATE_TABLET,
             api.CreateTablet("../etc", [Peer(s.uuid, s.address)]), api.TabletCreated)
    with pytest.raises(api.InvalidArgument):
        call(s.address, s.uuid, api.DATA_WRITE, api.Write("t1", "c", 0, [RowOp("put", b"", b"")]),
             api.Written)
    # A Raft message from a stale term, and one whose sender is not the caller.
    stale = AppendRequest(src="test-client", dest=s.uuid, term=0, prev_term=0, prev_index=0,
                          entries=(), commit_index=0)
    call(s.address, s.uuid, api.RAFT_MESSAGE, api.RaftMessages("t1", [stale]), api.Ack)
    forged = AppendRequest(src=cluster.servers[(lead + 1) % 3].uuid, dest=s.uuid, term=99,
                           prev_term=0, prev_index=0, entries=(), commit_index=0)
    with pytest.raises(api.InvalidArgument):
        call(s.address, s.uuid, api.RAFT_MESSAGE, api.RaftMessages("t1", [forged]), api.Ack)
    # Garbage bytes and a truncated frame on raw sockets: only that connection closes.
    host, port = s.address.split(":")
    for garbage in (b"\xff" * 64, b"\x00\x00\x00\x10abc"):
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(garbage)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(5)
            try:
                while sock.recv(4096):
                    pass
            except OSError:
                pass
    assert state(cluster, lead, "t1").role == "LEADER"
    acked = write_rows(cluster, "t1", 20)
    assert_acked_readable(cluster, "t1", acked)
    for i in range(3):
        cluster.stop(i)
    assert_traces_clean(cluster)


def _wal_segments(fs_root: str, tablet: str) -> list[str]:
    d = os.path.join(fs_root, "wals", tablet)
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.startswith("wal-")
                  and not n.endswith(".tmp.new"))


def test_torn_wal_tail_recovers_at_restart(cluster: ProcessCluster) -> None:
    create_tablet(cluster, "t1")
    lead = leader(cluster, "t1")
    acked = write_rows(cluster, "t1", 100)
    victim = (lead + 1) % 3
    cluster.kill(victim)
    last = _wal_segments(cluster.servers[victim].fs_root, "t1")[-1]
    with open(last, "r+b") as f:  # a torn batch after the last valid one
        f.seek(0, os.SEEK_END)
        end = f.tell()
        f.seek(0)
        data = f.read()
        valid_end = len(data.rstrip(b"\x00"))
        f.seek(min(valid_end, end))
        f.write(b"RVWB\x00\x00\x01\x00torn")
    cluster.start(victim)
    wait_for(lambda: state(cluster, victim, "t1").role == "FOLLOWER", 20, "restart")
    acked.update(write_rows(cluster, "t1", 50, prefix="more"))
    target = state(cluster, lead, "t1").last_opid
    wait_for(lambda: tuple(state(cluster, victim, "t1").last_opid) >= tuple(target), 30,
             "the restarted follower to catch up")
    assert_acked_readable(cluster, "t1", acked)
    for i in range(3):
        cluster.stop(i)
    assert_traces_clean(cluster)


def test_corrupt_wal_in_the_middle_leaves_only_that_tablet_offline(
        cluster: ProcessCluster) -> None:
    create_tablet(cluster, "bad")
    create_tablet(cluster, "good")
    leader(cluster, "bad")
    leader(cluster, "good")
    write_rows(cluster, "bad", 100, prefix="b")
    acked = write_rows(cluster, "good", 100, prefix="g")
    victim = 0
    cluster.stop(victim)  # a clean stop closes the segment (footer): it is not the last one
    first = _wal_segments(cluster.servers[victim].fs_root, "bad")[0]
    with open(first, "r+b") as f:
        f.seek(os.path.getsize(first) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    cluster.start(victim)
    s = cluster.servers[victim]
    status = call(s.address, s.uuid, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
    by_id = {r.tablet_id: r for r in status.replicas}
    assert by_id["bad"].state == "FAILED"
    assert "WAL" in by_id["bad"].reason and "wal-" in by_id["bad"].reason
    with pytest.raises(api.TabletNotRunning):
        call(s.address, s.uuid, api.DATA_READ, api.Read("bad", b"b000001"), api.ReadResult)
    # The server serves its other tablet, and takes part in its Raft group.
    wait_for(lambda: state(cluster, victim, "good").role in ("FOLLOWER", "LEADER"), 20,
             "the good tablet to run")
    acked.update(write_rows(cluster, "good", 50, prefix="g2"))
    others = [i for i in range(3) if i != victim]
    cluster.stop(others[0])  # now the good tablet needs server 0's vote and acks
    acked.update(write_rows(cluster, "good", 20, prefix="g3"))
    assert_acked_readable(cluster, "good", acked)
    for i in range(3):
        cluster.stop(i)
    assert_traces_clean(cluster)


def test_flushes_to_blocks_and_restarts_from_blocks_plus_wal(tmp_path: object) -> None:
    """A tiny flush threshold: rows move to data blocks while writes go on; a full restart
    bootstraps from the blocks and replays the WAL above the flushed index."""
    with ProcessCluster(str(tmp_path), 3, args=["--flush-mb", "0.02"]) as c:
        c.start_all()
        create_tablet(c, "t1")
        leader(c, "t1")
        acked = write_rows(c, "t1", 600)
        for i in range(3):
            data = os.path.join(c.servers[i].fs_root, "data")

            def flushed(data: str = data) -> bool:
                return len(os.listdir(data)) > 0

            wait_for(flushed, 20, "a flushed block")
        # Deletes must survive a flush and a restart too.
        deletes = Writer(c, "t1", "deleter")
        run(lambda: deletes.write([RowOp("delete", b"k000001"), RowOp("delete", b"k000002")]))
        acked.update(deletes.acked)
        for i in range(3):
            c.kill(i)
        c.start_all()
        leader(c, "t1")
        assert_acked_readable(c, "t1", acked)
        for i in range(3):
            c.stop(i)
        assert_traces_clean(c)


def test_a_server_with_24_tablets_restarted_under_writes(cluster: ProcessCluster) -> None:
    """The startup race, on real processes: a follower holding 24 tablets is killed and
    restarted four times while clients write to several of them. Every tablet it finds on
    disk is registered before it serves, so a leader's heartbeat during its startup hears
    "still starting" (retryable) and never asks for a copy of a READY replica; the traces
    of every incarnation check clean, and every acknowledged write is readable."""
    tablets = [f"t{n:02d}" for n in range(24)]
    for t in tablets:
        create_tablet(cluster, t)
    busy = tablets[:4]
    lead = leader(cluster, busy[0])
    victim = (lead + 1) % 3
    acked: dict[str, dict[bytes, bytes | None]] = {t: {} for t in busy}
    for round_ in range(4):
        cluster.kill(victim)
        cluster.start(victim)  # returns once it serves: its tablets are still starting
        for t in busy:  # writes while the victim's replicas start
            acked[t].update(write_rows(cluster, t, 40, clients=4, prefix=f"r{round_}-"))
        for t in tablets:
            def runs_again(t: str = t) -> bool:
                return state(cluster, victim, t).state == "RUNNING"

            wait_for(runs_again, 60, f"{t} to run again on the restarted server")
    for t in busy:
        assert_acked_readable(cluster, t, acked[t])
    for i in range(3):
        assert cluster.stop(i) == 0
    uuid = cluster.servers[victim].uuid
    copies = [line for path in Path(cluster.trace_dir).glob(f"{uuid}.*.jsonl")
              for line in path.read_text().splitlines() if '"event":"stc_' in line]
    assert copies == [], "a leader asked for a copy of a tablet that was only starting"
    assert_traces_clean(cluster)
