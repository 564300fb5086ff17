"""The web stack is imported by the server processes only: a CLI command that is not
``tserver run`` / ``master run`` starts without hypercorn, Starlette, Jinja2 or the
Prometheus client (they cost start-up time on every command)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("hypercorn", "starlette", "jinja2", "prometheus_client")
PROBE = """
import contextlib, io, sys
from revivify.impl.cli import main as m
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        m.main(sys.argv[1:])
    except SystemExit:
        pass
print(",".join(sorted({n.split(".")[0] for n in sys.modules} & set(sys.argv[0].split(",")))))
"""


@pytest.mark.parametrize("argv", [
    ["table", "list", "--masters", "127.0.0.1:1", "--deadline", "0.1"],
    ["ksck", "--masters", "127.0.0.1:1", "--deadline", "0.1"],
    ["tserver", "status", "--tserver", "127.0.0.1:1"],
    ["cluster", "status", "--root", "/nonexistent-revivify-root"],
    ["local-replica", "list", "--fs-root", "/nonexistent-revivify-root"],
])
def test_commands_start_without_the_web_stack(argv: list[str]) -> None:
    code = PROBE.replace("sys.argv[0]", repr(",".join(HEAVY)))
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", out.stdout


def test_the_server_run_does_import_it() -> None:
    """The probe can tell: the server's entry point brings the pages in (hypercorn itself
    only once it serves: servers/process.py)."""
    code = ("import sys, revivify.impl.servers.tserver; "
            f"print(all(h in sys.modules for h in {HEAVY[1:]!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "True"
