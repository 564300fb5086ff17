"""``--webserver-bind`` of ``tserver run`` (``master run`` shares the code:
impl/servers/process.py): the web line after the listening line, ``off``, a busy port named
on the command line (exit 2, one line), the default port busy (pages off, RPC on)."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RUN = [sys.executable, "-m", "revivify.impl.servers.tserver"]
WEB = re.compile(r"^revivify tserver ([0-9a-f]+) web (?:on http://(\S+)|off \((.*)\))$")


@contextmanager
def server(root: Path, *flags: str) -> Iterator[tuple[str, str]]:
    """A tablet server: its first two stdout lines (listening, web), then SIGTERM."""
    proc = subprocess.Popen([*RUN, "--fs-root", str(root), "--rpc-bind", "127.0.0.1:0",
                             *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        first, second = proc.stdout.readline().strip(), proc.stdout.readline().strip()
        yield first, second
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0


@contextmanager
def busy_port() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_web_line_follows_the_listening_line(tmp_path: Path) -> None:
    with server(tmp_path / "ts", "--webserver-bind", "127.0.0.1:0") as (first, second):
        uuid = first.split()[2]
        assert first.startswith(f"revivify tserver {uuid} listening on 127.0.0.1:")
        found = WEB.match(second)
        assert found is not None and found.group(1) == uuid and found.group(2)
        with urllib.request.urlopen(f"http://{found.group(2)}/api/v1/", timeout=30) as page:
            assert json.load(page)["address"] == first.rsplit(" ", 1)[1]


def test_off_serves_no_pages(tmp_path: Path) -> None:
    """No web line: stdout ends after the listening line (read once the server stopped)."""
    proc = subprocess.Popen([*RUN, "--fs-root", str(tmp_path / "ts"), "--rpc-bind",
                             "127.0.0.1:0", "--webserver-bind", "off"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert " listening on 127.0.0.1:" in first
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert proc.stdout.read() == ""


def test_a_busy_port_named_on_the_command_line_is_fatal(tmp_path: Path) -> None:
    with busy_port() as port:
        out = subprocess.run([*RUN, "--fs-root", str(tmp_path / "ts"), "--rpc-bind",
                              "127.0.0.1:0", "--webserver-bind", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("revivify tserver run: ") and out.stderr.count("\n") == 1
    assert "in use" in out.stderr


def test_the_default_port_busy_turns_the_pages_off(tmp_path: Path) -> None:
    """The default port is 8050 on the RPC host; a second server on the machine finds it
    taken and runs without pages. Tested on 127.0.0.2 so no other server's 8050 counts."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.2", 8050))
    sock.listen()
    try:
        proc = subprocess.Popen([*RUN, "--fs-root", str(tmp_path / "ts"), "--rpc-bind",
                                 "127.0.0.2:0"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        first, second = proc.stdout.readline().strip(), proc.stdout.readline().strip()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        sock.close()
    assert "listening on 127.0.0.2:" in first
    found = WEB.match(second)
    assert found is not None and found.group(3).startswith("127.0.0.2:8050: "), second


def test_test_only_flags_are_hidden_from_operators() -> None:
    """``tserver run --help`` does not offer the --fault-* flags (still accepted: the tests
    pass them), unless REVIVIFY_TEST_FLAGS=1 asks for them."""
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "revivify.impl.cli.main", "tserver", "run", "--help"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           env={k: v for k, v in os.environ.items()
                                if k != "REVIVIFY_TEST_FLAGS"})
    shown = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "REVIVIFY_TEST_FLAGS": "1"})
    assert quiet.returncode == 0 and "--fault-" not in quiet.stdout
    assert "--webserver-bind" in quiet.stdout
    assert shown.stdout.count("TEST ONLY") == 3
