"""The nemesis's fast form against real processes (make test): a small cluster with masters
(3 masters, 3 tablet servers, one tablet of 3 replicas) and three faults, once each: the
tablet's leader cut off (in the kernel where that can be done), the leader master killed
(-9) and restarted, every tablet server's power cut (on the lazy disk); after each heal, the
checks (ksck healthy, both histories so far linearizable); at the end the final reads, the
whole histories and the traces.

One run serves every test here (a cluster's start, stop and checks are most of its cost):
its verdict first, then its checks shown live on what it recorded: a phantom acknowledged
write makes the history check and the lost-write count fail, a tampered trace event makes
the trace check fail. (The runner's own failure path, ``--self-test lose-write``, records
the same phantom write inside a run; `make mutants` runs the profile under seeded bugs.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from revivify.impl.testing.nemesis.netns import unavailable
from revivify.impl.testing.nemesis.report import count_outcomes, longest_gap, lost_writes
from revivify.impl.testing.nemesis.runner import check_history
from revivify.impl.testing.nemesis.schedule import (
    MASTER_KILL,
    MAX_HOLD,
    PARTITION_LEADER,
    PARTITIONS,
    POWER_LOSS_ALL,
    PROFILES,
    TARGET_LEADER,
    schedule,
)

# Kernel partitions where they can be made (root, ip, nft: `make test` installs nftables),
# chosen explicitly: the fault file's RPC-layer cuts otherwise.
PARTITIONS_HERE = "kernel" if unavailable() is None else "rpc"


class ShortRun:
    def __init__(self, root: Path, code: int, summary: dict[str, Any], output: str) -> None:
        self.root, self.code, self.summary, self.output = root, code, summary, output


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> ShortRun:
    tmp = tmp_path_factory.mktemp("nemesis-short")
    out = tmp / "summary.json"
    done = subprocess.run(
        [sys.executable, "-m", "revivify.impl.testing.nemesis", "--profile", "short",
         "--seed", "1", "--workdir", str(tmp / "run"), "--json-out", str(out),
         "--partitions", PARTITIONS_HERE],
        capture_output=True, text=True, timeout=600)
    summary = json.loads(out.read_text()) if out.exists() else {}
    return ShortRun(tmp / "run", done.returncode, summary, done.stdout + done.stderr)


def test_short_profile_passes(short_run: ShortRun) -> None:
    """A cut, a master kill and a power cut, each followed by the checks: nothing lost,
    linearizable, traces clean, ksck healthy after every heal, exit 0."""
    summary, output = short_run.summary, short_run.output
    assert short_run.code == 0, output[-4000:]
    assert summary["lost_writes"] == 0
    assert summary["linearizable"] == {"register": True, "kv": True}
    assert summary["trace_verdict"] == "clean"
    assert summary["final_reads_ok"] is True
    assert summary["faults_by_kind"] == {PARTITION_LEADER: 1, MASTER_KILL: 1,
                                         POWER_LOSS_ALL: 1}
    checks = summary["checks_after_faults"]
    assert [c["after"] for c in checks] == [f["kind"] for f in summary["faults"]]
    for c in checks:
        assert c["ksck_healthy"] is True, c
        assert c["linearizable"] == {"register": True, "kv": True}, c
    # Each check's history is a prefix of the next: the workload ran on through the faults.
    sizes = [sum(1 for _ in (short_run.root / "checks" / f"{n}-{c['after']}-kv.jsonl")
                 .open()) for n, c in enumerate(checks, 1)]
    assert sizes == sorted(sizes) and sizes[0] > 0
    ops = summary["operations"]
    assert isinstance(ops, dict) and ops["ok"] > 0
    assert "profile / seed" in output and "verdict" in output
    assert "checks after each fault" in output
    assert not (short_run.root / "faults.json").exists()
    assert summary["partitions"] == PARTITIONS_HERE
    assert "partitions made in" in output
    # The cluster caught up after the leader's cut was lifted (TCP connections that lived
    # through a kernel cut retransmit before they deliver again), and the table says when.
    cut = [f for f in summary["faults"] if f["kind"] == PARTITION_LEADER]
    assert cut and all(isinstance(f["recovered_s"], float) for f in cut)
    assert "slowest recovery after a cut" in output
    # The master killed was the ready leader master when the fault fired.
    assert re.search(r"inject master-kill on master \d \(the leader\)", output), output[-3000:]
    assert re.search(r"inject partition-leader on server \d \(the leader\)", output)


def _with_phantom_write(map_path: Path, out: Path) -> None:
    """The run's map history plus an acknowledged write nobody sent, then a final read of
    its key that finds nothing (what the runner's --self-test lose-write records)."""
    events = [json.loads(line) for line in map_path.read_text().splitlines()]
    end = max(e["time"] for e in events) + 1.0
    events += [
        {"process": 10_000, "type": "invoke", "f": "write", "key": "lost", "value": 10**9,
         "time": end},
        {"process": 10_000, "type": "ok", "f": "write", "key": "lost", "value": 10**9,
         "time": end + 0.1},
        {"process": 10_001, "type": "invoke", "f": "read", "key": "lost", "value": None,
         "time": end + 0.2},
        {"process": 10_001, "type": "ok", "f": "read", "key": "lost", "value": None,
         "time": end + 0.3, "final": True},
    ]
    out.write_text("".join(json.dumps(e) + "\n" for e in events))


def test_the_history_checks_catch_a_lost_write(short_run: ShortRun, tmp_path: Path) -> None:
    """The run's own map history passes both checks; with a phantom acknowledged write
    whose final read finds nothing, both fail."""
    if short_run.code != 0:
        pytest.skip("the run itself failed (test_short_profile_passes says why)")
    map_path = short_run.root / "map.jsonl"
    events = [json.loads(line) for line in map_path.read_text().splitlines()]
    assert lost_writes(events) == []
    broken = tmp_path / "map-lost.jsonl"
    _with_phantom_write(map_path, broken)
    assert len(lost_writes([json.loads(x) for x in broken.read_text().splitlines()])) == 1
    assert check_history(str(broken), "kv", 120.0) is False


def _tamper(trace_dir: Path) -> str:
    """Change a tablet replica's ``become_leader`` (in the first trace file that has one)
    to claim a term one higher than it won: a leader in a term nobody voted it in. Returns
    the node tampered."""
    for path in sorted(trace_dir.rglob("*.jsonl")):
        lines = path.read_text().splitlines()
        for n, line in enumerate(lines):
            event = json.loads(line)
            if event["event"] == "become_leader" and event["tablet"] not in (
                    None, "sys-catalog"):
                event["args"]["t"] += 1
                lines[n] = json.dumps(event, separators=(",", ":"))
                path.write_text("\n".join(lines) + "\n")
                return str(event["node"])
    raise AssertionError(f"no tablet become_leader in {trace_dir}")


def test_the_trace_check_catches_a_tampered_event(short_run: ShortRun,
                                                  tmp_path: Path) -> None:
    """The run's traces, one event changed: ``revivify trace check`` reports violations
    (exit 1) where the untouched traces were clean."""
    if short_run.code != 0:
        pytest.skip("the run itself failed (test_short_profile_passes says why)")
    traces = tmp_path / "traces"
    shutil.copytree(short_run.root / "traces", traces)
    _tamper(traces)
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "trace", "check",
                           str(traces), "--json", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, (done.stdout + done.stderr)[-3000:]


class TestSchedule:
    def test_a_function_of_the_seed(self) -> None:
        """Same seed, same faults; another seed, others (in the long profiles)."""
        for name in ("short", "masters"):
            profile = PROFILES[name]
            assert schedule(profile, 7) == schedule(profile, 7)
        assert schedule(PROFILES["masters"], 7) != schedule(PROFILES["masters"], 8)

    def test_the_fast_form(self) -> None:
        """The short profile: each of its three kinds exactly once, whatever the seed or the
        duration; the master killed is the leader master."""
        profile = PROFILES["short"]
        for seed in range(20):
            faults = schedule(profile, seed)
            assert sorted(f.kind for f in faults) == sorted(
                (PARTITION_LEADER, MASTER_KILL, POWER_LOSS_ALL)), seed
            assert [f.target for f in faults if f.kind == MASTER_KILL] == [TARGET_LEADER]
            assert [f.at for f in faults] == sorted(f.at for f in faults)
        assert len(schedule(profile, 1)) == len(
            schedule(attrs.evolve(profile, duration=1.0), 1)) == 3
        masters = {f.target for seed in range(20) for f in schedule(PROFILES["masters"], seed)
                   if f.kind == MASTER_KILL}
        assert TARGET_LEADER in masters and masters - {TARGET_LEADER}  # leader and followers

    def test_partition_holds(self) -> None:
        """Partitions are held as their profile says (long ones in the long profiles), never
        past a minute; other faults keep the profile's hold; the short profile keeps its
        short holds."""
        for profile in PROFILES.values():
            for f in schedule(profile, 3):
                lo, hi = (profile.partition_hold if f.kind in PARTITIONS
                          and profile.partition_hold else profile.hold)
                assert lo <= f.hold <= hi <= MAX_HOLD, (profile.name, f)
        assert max(f.hold for f in schedule(PROFILES["short"], 1)) <= 3.0
        long_holds = [f.hold for seed in range(5) for f in schedule(PROFILES["masters"], seed)
                      if f.kind in PARTITIONS]
        assert max(long_holds) > PROFILES["masters"].hold[1]

    def test_every_kind_in_the_long_profiles(self) -> None:
        for name in ("standard", "masters"):
            assert {f.kind for f in schedule(PROFILES[name], 1)} == set(PROFILES[name].kinds)


class TestReport:
    def ev(self, process: int, kind: str, f: str, value: object, time: float,
           **extra: object) -> dict[str, object]:
        return {"process": process, "type": kind, "f": f, "key": "k", "value": value,
                "time": time, **extra}

    def test_lost_writes(self) -> None:
        """A final read of a superseded value, or of nothing after an acknowledged write, is
        a lost write; the latest write's value, or an unknown write's, is not."""
        history = [self.ev(1, "invoke", "write", 1, 0.0), self.ev(1, "ok", "write", 1, 0.1),
                   self.ev(2, "invoke", "write", 2, 0.2), self.ev(2, "ok", "write", 2, 0.3),
                   self.ev(3, "invoke", "write", 3, 0.4), self.ev(3, "info", "write", 3, 0.5)]
        for final, lost in ((2, 0), (3, 0), (1, 1), (None, 1)):
            reads = [self.ev(9, "invoke", "read", None, 1.0),
                     self.ev(9, "ok", "read", final, 1.1, final=True)]
            assert len(lost_writes(history + reads)) == lost, final

    def test_counts_and_gaps(self) -> None:
        history = [self.ev(1, "invoke", "read", None, 0.0), self.ev(1, "ok", "read", None, 1.0),
                   self.ev(2, "invoke", "write", 1, 1.0), self.ev(2, "info", "write", 1, 2.0),
                   self.ev(3, "invoke", "write", 2, 2.0)]
        assert count_outcomes(history) == {"ok": 1, "fail": 0, "info": 2}
        assert longest_gap([1.0, 1.5], 0.0, 5.0) == (3.5, 1.5)
