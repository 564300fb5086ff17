"""The nemesis's short profile against real processes (about 15 s of faults: a kill, a
pause, the leader cut off), and its self-test: the same run with a phantom acknowledged
write recorded must fail, so the lost-write and linearizability checks are live."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from revivify.impl.testing.nemesis.netns import unavailable
from revivify.impl.testing.nemesis.report import count_outcomes, longest_gap, lost_writes
from revivify.impl.testing.nemesis.schedule import (
    KILL,
    MAX_HOLD,
    PARTITIONS,
    PAUSE,
    PROFILES,
    STALLS,
    schedule,
)

# Kernel partitions where they can be made (root, ip, nft: `make test` installs nftables),
# chosen explicitly: the fault file's RPC-layer cuts otherwise.
PARTITIONS_HERE = "kernel" if unavailable() is None else "rpc"


def nemesis(tmp_path: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    out = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, "-m", "revivify.impl.testing.nemesis", "--profile", "short",
         "--seed", "1", "--workdir", str(tmp_path / "run"), "--json-out", str(out),
         "--partitions", PARTITIONS_HERE, *extra],
        capture_output=True, text=True, timeout=600)
    summary = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, summary, done.stdout + done.stderr


def test_short_profile_passes(tmp_path: Path) -> None:
    """Kill, pause and a partition: nothing lost, linearizable, traces clean, exit 0."""
    code, summary, output = nemesis(tmp_path)
    assert code == 0, output[-4000:]
    assert summary["lost_writes"] == 0
    assert summary["linearizable"] == {"register": True, "kv": True}
    assert summary["trace_verdict"] == "clean"
    assert summary["final_reads_ok"] is True
    kinds = summary["faults_by_kind"]
    assert isinstance(kinds, dict)
    assert kinds.get("kill") and kinds.get("pause") and kinds.get("partition-leader")
    assert kinds.get("power-loss-all")  # every server killed on the lazy disk, then back
    ops = summary["operations"]
    assert isinstance(ops, dict) and ops["ok"] > 0
    assert "profile / seed" in output and "verdict" in output
    assert not (tmp_path / "run" / "faults.json").exists()
    assert summary["partitions"] == PARTITIONS_HERE
    assert "partitions made in" in output
    # The cluster caught up after the leader's cut was lifted (TCP connections that lived
    # through a kernel cut retransmit before they deliver again), and the table says when.
    faults = summary["faults"]
    assert isinstance(faults, list)
    cut = [f for f in faults if f["kind"] == "partition-leader"]
    assert cut and all(isinstance(f["recovered_s"], float) for f in cut)
    assert "slowest recovery after a cut" in output


def test_short_profile_fails_on_a_lost_write(tmp_path: Path) -> None:
    """A phantom acknowledged write (recorded, never sent): lost, not linearizable, exit 1."""
    code, summary, output = nemesis(tmp_path, "--self-test", "lose-write")
    assert code == 1, output[-4000:]
    assert summary["lost_writes"] == 1
    assert summary["linearizable"] == {"register": True, "kv": False}
    assert summary["passed"] is False
    assert "FAIL" in output


class TestSchedule:
    def test_a_function_of_the_seed(self) -> None:
        """Same seed, same faults; another seed, others; the short profile has a kill, a
        pause and a partition."""
        profile = PROFILES["short"]
        assert schedule(profile, 7) == schedule(profile, 7)
        assert schedule(profile, 7) != schedule(profile, 8)
        kinds = {f.kind for f in schedule(profile, 7)}
        assert KILL in kinds and PAUSE in kinds and kinds & (STALLS - {PAUSE})

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
