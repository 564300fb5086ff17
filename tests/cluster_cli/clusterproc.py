"""Helpers for the tests of ``revivify cluster`` and ``revivify ksck`` (real processes).

`revivify(...)` runs the command line as a user does (a new Python process, so the servers
``cluster start`` spawns are detached from it, not children of the test). `cluster_root` is
the fixture every real-process test uses: whatever happens in the test, on the way out it
SIGKILLs every process recorded in ``DIR/cluster.json`` and waits until each has gone.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from revivify.checker.local import check_paths
from revivify.impl.cli import clusterfile
from revivify.impl.processes.control import pid_alive

COMMAND_TIMEOUT = 180  # seconds: a backstop for a command that hangs, not a measurement


def revivify(*argv: str, timeout: float = COMMAND_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def ok(*argv: str) -> subprocess.CompletedProcess[str]:
    out = revivify(*argv)
    assert out.returncode == 0, (argv, out.returncode, out.stdout, out.stderr)
    return out


def as_json(out: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(out.stdout)


def kill_recorded(root: str) -> None:
    """SIGKILL every process DIR/cluster.json names that still runs; wait until gone."""
    try:
        record = clusterfile.load(root)
    except clusterfile.ClusterFileError:
        return
    servers = record.masters + record.tservers
    for r in servers:
        if pid_alive(r.pid, r.start_ticks):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(r.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while any(pid_alive(r.pid, r.start_ticks) for r in servers):
        for r in servers:  # our own child if a cluster command ran in this process
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(r.pid, os.WNOHANG)
        assert time.monotonic() < deadline, "a cluster process survived SIGKILL"
        time.sleep(0.05)


@contextlib.contextmanager
def cleaned_up(root: str) -> Iterator[str]:
    try:
        yield root
    finally:
        kill_recorded(root)


def eventually(what: str, probe: Callable[[], bool], seconds: float = 90.0) -> None:
    """Poll `probe` until it holds; fail naming `what` after `seconds` (a bound on a hang,
    generous for a loaded machine; never a measurement)."""
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"not within {seconds:g}s: {what}"
        time.sleep(0.3)


def assert_traces_clean(root: str) -> None:
    report = check_paths([os.path.join(root, "traces")])
    bad = [v for v in report.sorted() if v.severity != "warning"]
    assert report.events > 0, "no trace events were written"
    assert not bad, "trace violations:\n" + "\n".join(
        f"{v.kind} {v.file}:{v.line} {v.message}" for v in bad[:10])


def here(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command run in this process (revivify.impl.cli.main.main), for the commands that
    only talk to servers: what a user sees, without a Python start-up per command. Never
    ``cluster start``/``restart`` (their servers would be this process's children)."""
    from revivify.impl.cli.main import main

    assert argv[0] != "cluster" or argv[1] not in ("start", "restart"), argv
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def ok_here(*argv: str) -> subprocess.CompletedProcess[str]:
    out = here(*argv)
    assert out.returncode == 0, (argv, out.returncode, out.stdout, out.stderr)
    return out
