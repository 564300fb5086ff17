"""Tablet copy in real processes: the leader re-creates a tombstoned or missing replica on
its own, an operator's copy, crashes at every copy step, a source lost mid-copy, throttling,
cancellation, the StartTabletCopy checks. Traces are checked at the end of every test."""

from __future__ import annotations

import os
from typing import Any

import pytest

from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.tserver import api
from revivify.impl.tserver.manager.shell import COPY_STEPS

from .helpers import (
    assert_acked_readable,
    assert_traces_clean,
    call,
    create_tablet,
    leader,
    state,
    wait_for,
)
from .test_deletion import delete, replicas
from .test_tserver_processes import write_rows

pytestmark = pytest.mark.timeout(300)


def stc(c: ProcessCluster, dest: int, tablet: str, source: int, *, caller_term: int,
        expected: str, last_opid: tuple[int, int] | None = None) -> None:
    d, s = c.servers[dest], c.servers[source]
    call(d.address, d.uuid, api.ADMIN_START_TABLET_COPY,
         api.StartTabletCopy(tablet, s.uuid, caller_term, s.uuid, s.address, expected,
                             last_opid), api.Ack)


def copies(c: ProcessCluster, i: int) -> list[api.CopyInfo]:
    s = c.servers[i]
    return call(s.address, s.uuid, api.ADMIN_LIST_COPIES, api.Empty(), api.CopyList).copies


def running(c: ProcessCluster, i: int, tablet: str) -> bool:
    info = replicas(c, i).get(tablet)
    return info is not None and info.state == "RUNNING"


def stop_all(c: ProcessCluster) -> None:
    for i in range(len(c.servers)):
        if c.servers[i].running:
            c.stop(i)


def test_leader_copies_a_tombstoned_follower_back(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 3, args=["--flush-mb", "0.05"]) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 200, clients=4)
        f = (lead + 1) % 3
        delete(c, f, "t1")
        # The leader hears TOMBSTONED and asks the follower to copy from it.
        wait_for(lambda: running(c, f, "t1"), 60, "the tombstoned follower to be copied back")
        target = state(c, lead, "t1").last_opid
        wait_for(lambda: tuple(state(c, f, "t1").last_opid) >= tuple(target), 30,
                 "the copied follower to catch up")
        more = write_rows(c, "t1", 50, clients=2, prefix="more")
        assert_acked_readable(c, "t1", {**acked, **more})
        root = c.servers[f].fs_root
        assert os.path.exists(os.path.join(root, "wals", "t1"))
        stop_all(c)
        assert_traces_clean(c)


def write_big(c: ProcessCluster, tablet: str, mb: float, prefix: str = "big") -> dict[
        bytes, bytes | None]:
    """About `mb` MB in rows of 32 KiB (so that copies take a while with small chunks)."""
    from revivify.impl.tablet.ops import RowOp

    from .helpers import Writer, run

    value = b"x" * (32 << 10)
    n = max(1, int(mb * 32))
    writers = [Writer(c, tablet, f"{prefix}-{k}") for k in range(4)]

    async def main() -> None:
        import trio

        async def lane(w: Writer, k: int) -> None:
            for i in range(k, n, len(writers)):
                await w.write([RowOp("put", f"{prefix}{i:06d}".encode(), value)])
        async with trio.open_nursery() as nursery:
            for k, w in enumerate(writers):
                nursery.start_soon(lane, w, k)
    run(main, seconds=180)
    acked: dict[bytes, bytes | None] = {}
    for w in writers:
        acked.update(w.acked)
    return acked


def traced(c: ProcessCluster, event: str) -> list[dict[str, object]]:
    """Every traced event of that name, from every server's trace files."""
    import json

    out = []
    for name in sorted(os.listdir(c.trace_dir)):
        with open(os.path.join(c.trace_dir, name)) as f:
            for line in f:
                if f'"{event}"' in line:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    if row["event"] == event:
                        out.append(row)
    return out


def test_corrupt_chunks_are_refused_and_fetched_again(tmp_path: object) -> None:
    args = ["--flush-mb", "0.05", "--fault-corrupt-copy-chunks", "2"]
    with ProcessCluster(str(tmp_path), 3, args=args) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 300, clients=4)
        f = (lead + 1) % 3
        delete(c, f, "t1")
        wait_for(lambda: running(c, f, "t1"), 60, "the follower to be copied back")
        with open(c.servers[f].log_path) as log:
            assert "refused chunk" in log.read()  # the corrupt chunks were refused
        stop_all(c)
        c.start_all()
        assert_acked_readable(c, "t1", acked)
        stop_all(c)
        assert_traces_clean(c)


def test_crash_after_each_copy_step(tmp_path: object) -> None:
    """The destination crashes right after each traced copy step. Before the commit point
    (copy_mark_ready) it restarts as a tombstone with its previous last OpId; after it, as a
    READY replica. Either way the next copy (or nothing) brings it back."""
    with ProcessCluster(str(tmp_path), 3, args=["--no-auto-copy", "--flush-mb", "0.02"]) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 300, clients=4)
        victim = (lead + 1) % 3
        wait_for(lambda: state(c, victim, "t1").last_opid == state(c, lead, "t1").last_opid,
                 20, "the victim to catch up")
        delete(c, victim, "t1")
        tomb_last = tuple(replicas(c, victim)["t1"].last_opid)
        assert tomb_last[1] > 0
        for step in COPY_STEPS:
            c.stop(victim)
            c.start(victim, extra=["--fault-crash-after", step])
            term = state(c, lead, "t1").term
            stc(c, victim, "t1", lead, caller_term=term, expected="DELETED")
            proc = c.servers[victim].proc
            assert proc is not None and proc.wait(timeout=60) != 0, step  # it crashed
            c.kill(victim)
            c.start(victim)
            info = replicas(c, victim)["t1"]
            if COPY_STEPS.index(step) < COPY_STEPS.index("copy_mark_ready"):
                assert info.state == "TOMBSTONED", step
                assert tuple(info.last_opid) == tomb_last, step  # the tombstone's OpId kept
            else:
                assert info.state == "RUNNING", step
                delete(c, victim, "t1")
                tomb_last = tuple(replicas(c, victim)["t1"].last_opid)
        stc(c, victim, "t1", lead, caller_term=state(c, lead, "t1").term, expected="DELETED")
        wait_for(lambda: running(c, victim, "t1"), 60, "the last copy to finish")
        c.kill(lead)  # the copied replica is needed for a majority now
        leader(c, "t1", among=[i for i in range(3) if i != lead], seconds=30)
        assert_acked_readable(c, "t1", acked)
        stop_all(c)
        assert_traces_clean(c)


def test_start_tablet_copy_checks(tmp_path: object) -> None:
    """StartTabletCopy refuses with a typed reason before touching anything: a deposed
    leader's stale term cannot make a replica delete itself."""
    with ProcessCluster(str(tmp_path), 3, args=["--no-auto-copy"]) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        write_rows(c, "t1", 50, clients=2)
        f = (lead + 1) % 3
        wait_for(lambda: state(c, f, "t1").last_opid == state(c, lead, "t1").last_opid, 20,
                 "the follower to catch up")
        last = tuple(state(c, f, "t1").last_opid)
        # A stale caller: its term is below the replica's last logged term.
        c.stop(lead)  # a new leader, a new term, a new no-op entry
        new = leader(c, "t1", among=[i for i in range(3) if i != lead], seconds=30)
        write_rows(c, "t1", 5, clients=1, prefix="x")
        other = 3 - lead - new
        wait_for(lambda: state(c, other, "t1").last_opid[0] > last[0], 20, "the new term")
        cases = [
            (dict(caller_term=last[0], expected="READY"), "STALE_TERM"),
            (dict(caller_term=99, expected="DELETED"), "ILLEGAL_STATE"),
            (dict(caller_term=99, expected="READY", last_opid=(1, 1)), "OPID_MISMATCH"),
        ]
        for kw, reason in cases:
            with pytest.raises(api.CopyRefused) as refused:
                stc(c, other, "t1", new, **kw)  # type: ignore[arg-type]
            assert refused.value.reason == reason
            assert replicas(c, other)["t1"].state == "RUNNING"
        with pytest.raises(api.InvalidArgument):
            stc(c, other, "t1", new, caller_term=9, expected="SOMETHING")
        assert {r["args"]["reason"] for r in traced(c, "stc_reject")} == {  # type: ignore[index]
            "STALE_TERM", "ILLEGAL_STATE", "OPID_MISMATCH"}
        stop_all(c)
        assert_traces_clean(c)


def test_lagging_follower_behind_log_gc_is_healed_by_copy(tmp_path: object) -> None:
    args = ["--flush-mb", "0.01", "--log-retain-entries", "0"]
    with ProcessCluster(str(tmp_path), 3, args=args) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 50, clients=2)
        f = (lead + 1) % 3
        c.stop(f)
        acked.update(write_rows(c, "t1", 600, clients=4, prefix="gone"))
        c.start(f)
        # Its log ends before the leader's first retained entry: only a copy helps.
        wait_for(lambda: any(r["tablet"] == "t1" and r["node"] == c.servers[f].uuid
                             for r in traced(c, "copy_start_replica")), 60,
                 "the lagging follower to be copied")
        wait_for(lambda: running(c, f, "t1"), 30, "the copied follower to run")
        c.kill(lead)
        leader(c, "t1", among=[i for i in range(3) if i != lead], seconds=30)
        assert_acked_readable(c, "t1", acked)
        stop_all(c)
        assert_traces_clean(c)


# Copies that take seconds whatever the machine's load: small chunks, each served late.
SLOW_COPY = ["--copy-chunk-kb", "16", "--fault-slow-copy-ms", "25", "--flush-mb", "1"]


def copying(c: ProcessCluster, i: int, tablet: str) -> api.CopyInfo | None:
    found = [x for x in copies(c, i) if x.tablet_id == tablet and x.bytes_done > 0]
    return found[0] if found else None


def test_source_dies_mid_copy_then_a_tombstone_vote_elects_the_next_source(
        tmp_path: object) -> None:
    """The leader (the copy's source) is killed mid-copy: the destination aborts and is a
    tombstone with its previous last OpId again. The third replica needs the tombstone's
    vote to lead; it gets it, and as the new leader copies the tablet back."""
    with ProcessCluster(str(tmp_path), 3, args=SLOW_COPY) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_big(c, "t1", 6)
        dest = (lead + 1) % 3
        third = 3 - lead - dest
        wait_for(lambda: state(c, dest, "t1").last_opid == state(c, lead, "t1").last_opid,
                 30, "the destination to catch up")
        delete(c, dest, "t1")
        tomb_last = tuple(replicas(c, dest)["t1"].last_opid)
        wait_for(lambda: copying(c, dest, "t1"), 30, "the copy to be under way")
        c.kill(lead)
        wait_for(lambda: replicas(c, dest)["t1"].state == "TOMBSTONED", 30,
                 "the destination to tombstone itself")
        assert tuple(replicas(c, dest)["t1"].last_opid) == tomb_last
        aborts = [r for r in traced(c, "copy_abort") if r["node"] == c.servers[dest].uuid]
        assert aborts, "the failed copy traced no copy_abort"
        assert leader(c, "t1", among=[third], seconds=30) == third
        wait_for(lambda: running(c, dest, "t1"), 90, "the new leader to copy it back")
        assert_acked_readable(c, "t1", acked)
        stop_all(c)
        assert_traces_clean(c)


def test_source_deletes_the_tablet_during_the_session_and_the_copy_completes(
        tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 3, args=["--no-auto-copy", *SLOW_COPY]) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_big(c, "t1", 6)
        source, dest = (lead + 1) % 3, (lead + 2) % 3
        for i in (source, dest):
            def caught_up(i: int = i) -> bool:
                return state(c, i, "t1").last_opid == state(c, lead, "t1").last_opid

            wait_for(caught_up, 30, "the followers to catch up")
        delete(c, dest, "t1")
        term = state(c, source, "t1").term
        stc(c, dest, "t1", source, caller_term=term, expected="DELETED")
        wait_for(lambda: copying(c, dest, "t1"), 30, "the copy to be under way")
        delete(c, source, "t1")  # the session holds its files open
        wait_for(lambda: running(c, dest, "t1"), 90, "the copy to complete anyway")
        assert replicas(c, source)["t1"].state == "TOMBSTONED"
        c.kill(lead)
        stc(c, source, "t1", dest, caller_term=99, expected="DELETED")
        wait_for(lambda: running(c, source, "t1"), 90, "the source to be copied back")
        assert_acked_readable(c, "t1", acked)
        stop_all(c)
        assert_traces_clean(c)


def test_throttling_two_concurrent_sessions_and_cancel(tmp_path: object) -> None:
    args = ["--no-auto-copy", "--max-concurrent-copies", "2", *SLOW_COPY]
    with ProcessCluster(str(tmp_path), 3, args=args) as c:
        c.start_all()
        tablets = ["t1", "t2", "t3"]
        lead: dict[str, int] = {}
        for t in tablets:
            create_tablet(c, t)
            lead[t] = leader(c, t)
            write_big(c, t, 3, prefix=t)
        dest = 0
        srcs = {t: next(i for i in (1, 2) if i != dest) for t in tablets}
        for t in tablets:
            def caught_up(t: str = t) -> bool:
                return state(c, dest, t).last_opid == state(c, srcs[t], t).last_opid

            wait_for(caught_up, 30, "catch up")
            delete(c, dest, t)
        for t in tablets[:2]:
            stc(c, dest, t, srcs[t], caller_term=99, expected="DELETED")
        with pytest.raises(api.CopyRefused) as refused:
            stc(c, dest, "t3", srcs["t3"], caller_term=99, expected="DELETED")
        assert refused.value.reason == "THROTTLED"
        with pytest.raises(api.CopyRefused) as again:
            stc(c, dest, "t1", srcs["t1"], caller_term=99, expected="DELETED")
        assert again.value.reason == "ALREADY_IN_PROGRESS"
        listed = {x.tablet_id for x in copies(c, dest)}
        assert listed == {"t1", "t2"}  # two sessions at once
        # Cancel one: it is a tombstone again, with no downloaded files left.
        s = c.servers[dest]
        call(s.address, s.uuid, api.ADMIN_CANCEL_COPY, api.TabletRef("t2"), api.Ack)
        wait_for(lambda: replicas(c, dest)["t2"].state == "TOMBSTONED", 30, "the cancel")
        wait_for(lambda: running(c, dest, "t1"), 90, "the other copy")
        stc(c, dest, "t3", srcs["t3"], caller_term=99, expected="DELETED")
        stc(c, dest, "t2", srcs["t2"], caller_term=99, expected="DELETED")
        wait_for(lambda: running(c, dest, "t3") and running(c, dest, "t2"), 120, "the rest")
        stop_all(c)
        assert_traces_clean(c)


def test_failed_replica_is_deleted_and_copied_again(tmp_path: object) -> None:
    """A replica FAILED at startup (a corrupt WAL segment in the middle) is deleted by an
    operator; the tombstone answers TOMBSTONED and the leader copies it back."""
    from .test_tserver_processes import _wal_segments

    with ProcessCluster(str(tmp_path), 3) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 100, clients=4)
        victim = (lead + 1) % 3
        wait_for(lambda: state(c, victim, "t1").last_opid == state(c, lead, "t1").last_opid,
                 20, "the victim to catch up")
        c.stop(victim)
        first = _wal_segments(c.servers[victim].fs_root, "t1")[0]
        with open(first, "r+b") as f:
            f.seek(os.path.getsize(first) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
        c.start(victim)
        assert replicas(c, victim)["t1"].state == "FAILED"
        delete(c, victim, "t1")
        wait_for(lambda: running(c, victim, "t1"), 60, "the leader to copy it back")
        acked.update(write_rows(c, "t1", 20, clients=2, prefix="after"))
        c.kill(lead)
        leader(c, "t1", among=[i for i in range(3) if i != lead], seconds=30)
        assert_acked_readable(c, "t1", acked)
        stop_all(c)
        assert_traces_clean(c)


def test_copy_over_a_tombstone_keeps_its_vote_in_the_same_term(tmp_path: object) -> None:
    """A tombstone that voted in term T keeps that vote when a copy from a source in term T
    merges the cmeta; when the source's term is higher, the merged vote is cleared."""
    with ProcessCluster(str(tmp_path), 3, args=["--no-auto-copy"]) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        write_rows(c, "t1", 30, clients=2)
        tomb = (lead + 1) % 3
        survivor = 3 - lead - tomb
        wait_for(lambda: state(c, tomb, "t1").last_opid == state(c, lead, "t1").last_opid,
                 20, "catch up")
        delete(c, tomb, "t1")
        c.kill(lead)
        assert leader(c, "t1", among=[survivor], seconds=30) == survivor
        voted = replicas(c, tomb)["t1"]
        assert voted.voted_for == c.servers[survivor].uuid
        term = state(c, survivor, "t1").term
        assert voted.term == term
        stc(c, tomb, "t1", survivor, caller_term=term, expected="DELETED")
        wait_for(lambda: running(c, tomb, "t1"), 60, "the copy")
        merge: Any = [r for r in traced(c, "copy_merge_cmeta")
                 if r["node"] == c.servers[tomb].uuid][-1]["args"]
        assert merge["result"]["term"] == term
        assert merge["result"]["voted_for"] == c.servers[survivor].uuid
        # A higher term at the source: the merged cmeta adopts it without a vote.
        c.start(lead)
        delete(c, tomb, "t1")
        call(c.servers[survivor].address, c.servers[survivor].uuid, api.ADMIN_STEP_DOWN,
             api.StepDown("t1"), api.Ack)
        new = leader(c, "t1", among=[lead, survivor], seconds=30)
        higher = state(c, new, "t1").term
        assert higher > term
        stc(c, tomb, "t1", new, caller_term=higher, expected="DELETED")
        wait_for(lambda: running(c, tomb, "t1"), 60, "the second copy")
        merge = [r for r in traced(c, "copy_merge_cmeta")
                 if r["node"] == c.servers[tomb].uuid][-1]["args"]
        assert merge["result"]["term"] == higher
        local: Any = merge["local"]
        result: Any = merge["result"]
        # The tombstone still votes (tombstones do), so the elections after the step-down may
        # have moved its term and vote on from (term, survivor) before the copy came.
        assert local["term"] >= term
        if local["term"] == term:
            assert local["voted_for"] == c.servers[survivor].uuid
        if local["term"] < higher:
            assert result["voted_for"] is None  # a higher-term source: the vote is cleared
        else:
            assert result["voted_for"] == local["voted_for"]  # same term: the vote is kept
        stop_all(c)
        assert_traces_clean(c)


def test_full_delete_removes_the_cmeta_and_never_votes_again(tmp_path: object) -> None:
    with ProcessCluster(str(tmp_path), 3, args=["--no-auto-copy"]) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        write_rows(c, "t1", 20, clients=2)
        f = (lead + 1) % 3
        delete(c, f, "t1", mode="DELETED")
        assert "t1" not in replicas(c, f)
        root = c.servers[f].fs_root
        assert not os.path.exists(os.path.join(root, "consensus-meta", "t1"))
        assert not os.path.exists(os.path.join(root, "tablet-meta", "t1"))
        with pytest.raises(api.TabletNotFound):
            delete(c, f, "t1")
        c.stop(f)
        c.start(f)
        assert "t1" not in replicas(c, f)
        # A tombstone can be fully deleted too.
        g = 3 - lead - f
        delete(c, g, "t1")
        delete(c, g, "t1", mode="DELETED")
        assert "t1" not in replicas(c, g)
        stop_all(c)
        assert_traces_clean(c)


def test_wiped_server_comes_back_with_a_new_uuid_and_is_re_replicated(
        tmp_path: object) -> None:
    """A server's disk is lost: `tserver wipe`, a new UUID at the next start, requests to
    the old UUID refused; the operator swaps the old UUID for the new one in the config and
    the leader copies the tablet to it."""
    import subprocess
    import sys

    from revivify.impl.consensus.messages import ConfigChange, Peer
    from revivify.impl.rpc import WrongServerUuid

    with ProcessCluster(str(tmp_path), 3) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        acked = write_rows(c, "t1", 100, clients=4)
        v = (lead + 1) % 3
        old = c.servers[v].uuid
        c.kill(v)
        out = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "tserver",
                              "wipe", "--fs-root", c.servers[v].fs_root, "--yes"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        c.start(v)
        new = c.servers[v].uuid
        assert new != old
        with pytest.raises(WrongServerUuid):
            call(c.servers[v].address, old, api.ADMIN_STATUS, api.Empty(), api.ServerStatus)
        assert replicas(c, v) == {}
        s = c.servers[lead]

        def change(kind: str, peer: Peer) -> None:
            cas = state(c, lead, "t1").config_index
            call(s.address, s.uuid, api.ADMIN_CHANGE_CONFIG,
                 api.ChangeConfig("t1", ConfigChange(kind, peer), cas),  # type: ignore[arg-type]
                 api.ConfigChanged)
        change("REMOVE", Peer(old, c.servers[v].address))
        change("ADD", Peer(new, c.servers[v].address))
        wait_for(lambda: running(c, v, "t1"), 60, "the leader to copy the tablet to it")
        c.kill(lead)  # the re-replicated server is needed for a majority now
        leader(c, "t1", among=[i for i in range(3) if i != lead], seconds=30)
        assert_acked_readable(c, "t1", acked)
        stop_all(c)
        assert_traces_clean(c)


def test_copy_commands(tmp_path: object) -> None:
    """revivify replica copy / copy list / copy cancel as an operator runs them."""
    import json
    import subprocess
    import sys

    def revivify(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *args],
                              capture_output=True, text=True, timeout=120)

    args = ["--no-auto-copy", *SLOW_COPY]
    with ProcessCluster(str(tmp_path), 3, args=args) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        write_big(c, "t1", 6)
        f = (lead + 1) % 3
        src, dst = c.servers[lead].address, c.servers[f].address
        out = revivify("copy", "list", "--tserver", dst, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"copies": [], "max_concurrent": 4}
        # A READY replica is tombstoned first, then copied; --wait shows progress.
        out = revivify("replica", "copy", "--from", src, "--to", dst, "--tablet", "t1",
                       "--wait", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["state"] == "RUNNING"
        # A copy started without --wait, seen in `copy list`, then cancelled.
        # Seen by `copy list` itself while it runs: a separate process that starts in a
        # second or two, so the copy must outlast that (more rows than the first one had).
        write_big(c, "t1", 6, prefix="more")
        out = revivify("replica", "copy", "--from", src, "--to", dst, "--tablet", "t1")
        assert out.returncode == 0, out.stderr

        def listed_row() -> dict[str, Any] | None:
            listed = json.loads(revivify("copy", "list", "--tserver", dst, "--json").stdout)
            rows = [r for r in listed["copies"] if r["tablet_id"] == "t1"]
            return rows[0] if rows and rows[0]["bytes_done"] > 0 else None

        row = wait_for(listed_row, 30, "copy list to show the copy under way")
        assert row["total_bytes"] > 0
        out = revivify("copy", "cancel", "--tserver", dst, "--tablet", "t1")
        assert out.returncode == 0, out.stderr
        wait_for(lambda: replicas(c, f)["t1"].state == "TOMBSTONED", 30, "the cancel")
        # Bad input: clear errors, exit codes 1 (refused) and 2 (usage).
        out = revivify("copy", "cancel", "--tserver", dst, "--tablet", "t1")
        assert out.returncode == 1 and "no copy of tablet t1" in out.stderr
        out = revivify("replica", "copy", "--from", src, "--to", "nowhere", "--tablet", "t1")
        assert out.returncode == 2
        out = revivify("replica", "copy", "--from", src, "--to", src, "--tablet", "t1")
        assert out.returncode == 1 and "itself" in out.stderr
        stop_all(c)
        assert_traces_clean(c)
