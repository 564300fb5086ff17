"""``make demo``'s cluster part, run as ``make demo`` runs it (real processes).

* the demo interrupted (SIGINT, as Ctrl-C sends it) once the masters have healed the table
  after a tablet server's kill -9 and the server is back (stages 1-6: start, table,
  writers, kill, ksck under-replicated, healing, restart, ksck healthy; about 40 s): exit
  130, every process it started gone. The one in ``make test``.
* ``--quick --short`` (slow: about 70 s here; no checking, no Spark, no master add/remove
  or retire: their own tests are tests/master_integration/test_master_membership.py and
  test_healing.py): a cluster of 3 masters and 4 tablet servers, writers throughout, a
  tablet server killed and healed by the masters, the leader master killed, a full restart,
  every acknowledged row read back, the traces checked; exit 0 and nothing left running.
* ``--quick`` (slow): the whole cluster part, master add/remove and retire included.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from revivify.impl.cli import clusterfile
from revivify.impl.processes.control import pid_alive

DEMO = [sys.executable, "-m", "revivify.impl.cli.demo"]
BOUND = 600  # seconds: a hang, not a measurement


def recorded_alive(cluster_dir: Path) -> list[str]:
    record = clusterfile.load(str(cluster_dir))
    follower = record.follower
    return [r.name for r in record.masters + record.tservers
            if pid_alive(r.pid, r.start_ticks)] + \
        (["follower"] if follower and pid_alive(follower.pid, follower.start_ticks) else [])


def extra_master_alive(cluster_dir: Path) -> bool:
    """The demo's fourth master (stage 8), found by its directory on its command line."""
    marker = str(cluster_dir / "m-extra").encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker in f.read():
                        return True
            except OSError:
                continue
    return False


def run_demo(workdir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    started = time.monotonic()
    out = subprocess.run([*DEMO, *flags, "--workdir", str(workdir)], capture_output=True,
                         text=True, timeout=BOUND, check=False, stdin=subprocess.DEVNULL)
    print(out.stdout)
    print(f"demo {' '.join(flags)}: exit {out.returncode} in "
          f"{time.monotonic() - started:.0f} s")
    return out


def assert_passed(out: subprocess.CompletedProcess[str], workdir: Path) -> None:
    log = workdir / "demo.log"
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-2000:],
                                 log.read_text()[-3000:] if log.exists() else "")
    lines = out.stdout.splitlines()
    assert any(line.startswith("verdict") and line.endswith("PASS") for line in lines)
    assert any(line.startswith("acknowledged rows lost") and line.split()[-1] == "0"
               for line in lines)
    assert "0 lost" in out.stdout and "re-replicate" in out.stdout
    assert "trace check:" in out.stdout and "0 violations" in out.stdout
    # The follower ran beside the cluster and agreed with the batch check (issue 33).
    assert "verdicts: trace follower CLEAN (live), CLEAN (final); trace check CLEAN" \
        in out.stdout
    assert recorded_alive(workdir / "cluster") == []
    assert not extra_master_alive(workdir / "cluster")


@pytest.mark.slow
def test_demo_short(tmp_path: Path) -> None:
    out = run_demo(tmp_path / "demo", "--quick", "--short")
    assert_passed(out, tmp_path / "demo")
    assert "healed at" in out.stdout and "the ready leader after" in out.stdout


def test_demo_interrupted_leaves_nothing_running(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    proc = subprocess.Popen([*DEMO, "--quick", "--short", "--workdir", str(workdir)],
                            stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:  # until the table is healed and the killed server back
            seen.append(line)
            if line.startswith(" 6."):
                break
        else:
            pytest.fail("the demo ended before stage 6:\n" + "".join(seen))
        text = "".join(seen)
        assert "under-replicated" in text and text.count("healed at") == 4, text
        assert "ksck HEALTHY" in seen[-1], text
        assert recorded_alive(workdir / "cluster"), "no cluster process ran"
        proc.send_signal(signal.SIGINT)
        rest = proc.stdout.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, rest
    assert "interrupted" in rest and "verdict" in rest
    assert recorded_alive(workdir / "cluster") == []


@pytest.mark.slow
def test_demo_quick_with_master_membership_and_retire(tmp_path: Path) -> None:
    out = run_demo(tmp_path / "demo", "--quick")
    assert_passed(out, tmp_path / "demo")
    assert "master remove" in out.stdout and "tserver retire" in out.stdout
    record = json.loads((tmp_path / "demo" / "cluster" / "cluster.json").read_text())
    assert len(record["masters"]) == 3 and len(record["tservers"]) == 4
