"""``--rpc-advertised-address`` (issue 31): a server bound to a wildcard address names
itself to others by the address it advertises, and a wildcard bind without one is refused.

Real processes on this machine: a master and a tablet server each bound to ``0.0.0.0`` and
advertising ``127.0.0.1``; the masters list both under the advertised address (never the
wildcard), with their pages under the advertised host too. The refusals run the command as
an operator does (``revivify tserver run`` / ``master run``): one line, exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from revivify.impl.client import ClientOptions
from revivify.impl.client.master import master_call
from revivify.impl.master import api
from revivify.impl.processes.control import (
    ServerProcess,
    await_listening,
    free_port,
    kill_process,
    spawn,
)
from revivify.impl.processes.masters import MASTER_LISTENING
from revivify.impl.processes.tservers import TSERVER_LISTENING

CLI = [sys.executable, "-m", "revivify.impl.cli.main"]


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout,
                          check=False, stdin=subprocess.DEVNULL)


def refused(kind: str, root: Path, *flags: str) -> str:
    """The one stderr line of ``revivify KIND run`` refusing ``flags`` (exit 2)."""
    out = cli(kind, "run", "--fs-root", str(root), *flags, timeout=60)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"revivify {kind} run: "), out.stderr
    return out.stderr.strip()


@pytest.mark.parametrize("kind", ["tserver", "master"])
@pytest.mark.parametrize("bind", ["0.0.0.0:17053", "[::]:17053"])
def test_a_wildcard_bind_without_an_advertised_address_is_refused(
        tmp_path: Path, kind: str, bind: str) -> None:
    line = refused(kind, tmp_path / "s", "--rpc-bind", bind)
    assert "wildcard" in line and "--rpc-advertised-address" in line and bind in line, line
    assert not (tmp_path / "s").exists()  # refused before the directory is formatted


@pytest.mark.parametrize("kind", ["tserver", "master"])
@pytest.mark.parametrize(("advertised", "why"), [
    ("nohost", "no port"),
    ("127.0.0.1:0", "port 0"),
    ("0.0.0.0:17053", "wildcard"),
    ("", "empty"),
])
def test_a_bad_advertised_address_is_refused(tmp_path: Path, kind: str, advertised: str,
                                             why: str) -> None:
    line = refused(kind, tmp_path / "s", "--rpc-bind", "0.0.0.0:17053",
                   "--rpc-advertised-address", advertised)
    assert "--rpc-advertised-address" in line and why in line, line


def test_an_advertised_address_needs_a_fixed_bind_port(tmp_path: Path) -> None:
    line = refused("tserver", tmp_path / "s", "--rpc-bind", "0.0.0.0:0",
                   "--rpc-advertised-address", "127.0.0.1:17053")
    assert "fixed --rpc-bind port" in line, line


def test_a_master_must_find_its_advertised_address_in_masters(tmp_path: Path) -> None:
    """--masters names masters as others reach them: this one by its advertised address,
    not by its bind address."""
    line = refused("master", tmp_path / "m", "--rpc-bind", "0.0.0.0:17051",
                   "--rpc-advertised-address", "127.0.0.1:17051",
                   "--masters", "0.0.0.0:17051,127.0.0.1:17052,127.0.0.1:17053")
    assert "--rpc-advertised-address 127.0.0.1:17051" in line, line


@pytest.fixture
def processes() -> Iterator[list[ServerProcess]]:
    """The servers a test starts; SIGKILLed on the way out, however it ends."""
    started: list[ServerProcess] = []
    yield started
    for s in started:
        kill_process(s)


def wait_for(what: str, probe: Callable[[], Any], seconds: float = 60.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {seconds:g}s")
        time.sleep(0.2)


def test_servers_bound_to_a_wildcard_are_listed_as_advertised(
        tmp_path: Path, processes: list[ServerProcess]) -> None:
    mport, tport = free_port(), free_port()
    master = ServerProcess(0, str(tmp_path / "m"), str(tmp_path / "traces"),
                           str(tmp_path / "m.log"), port=mport)
    tserver = ServerProcess(0, str(tmp_path / "ts"), str(tmp_path / "traces"),
                            str(tmp_path / "ts.log"), port=tport)
    masters = f"127.0.0.1:{mport}"
    processes += [master, tserver]
    spawn(master, [sys.executable, "-m", "revivify.impl.servers.master",
                   "--fs-root", master.fs_root, "--trace-dir", master.trace_dir,
                   "--rpc-bind", f"0.0.0.0:{mport}", "--rpc-advertised-address", masters,
                   "--webserver-bind", "0.0.0.0:0"])
    spawn(tserver, [sys.executable, "-m", "revivify.impl.servers.tserver",
                    "--fs-root", tserver.fs_root, "--trace-dir", tserver.trace_dir,
                    "--rpc-bind", f"0.0.0.0:{tport}",
                    "--rpc-advertised-address", f"127.0.0.1:{tport}",
                    "--webserver-bind", "0.0.0.0:0", "--masters", masters,
                    "--heartbeat-ms", "200"])
    mline = await_listening(master, MASTER_LISTENING, "master", 60).group(0)
    tline = await_listening(tserver, TSERVER_LISTENING, "tserver", 60).group(0)
    assert mline.endswith(f"listening on {masters}"), mline
    assert tline.endswith(f"listening on 127.0.0.1:{tport}"), tline

    def tserver_listed() -> dict[str, Any] | None:
        out = cli("tserver", "list", "--masters", masters, "--json", timeout=60)
        if out.returncode != 0:
            return None
        rows: list[dict[str, Any]] = json.loads(out.stdout)["tservers"]
        return rows[0] if rows else None

    row = wait_for("registered tablet server", tserver_listed)
    assert row["address"] == f"127.0.0.1:{tport}", row

    # Its pages, served on every interface, are known under the advertised host too.
    async def tservers() -> api.TabletServerList:
        return await master_call([masters], api.MASTER_LIST_TSERVERS, api.Empty(),
                                 api.TabletServerList, ClientOptions(deadline=30.0))

    def web_known() -> str:
        (entry,) = trio.run(tservers).tservers
        web: str = entry.web_address
        return web

    web = wait_for("tablet server's pages in its heartbeats", web_known)
    assert web.startswith("127.0.0.1:") and not web.endswith(":0"), web

    out = cli("master", "list", "--masters", masters, "--json", timeout=60)
    assert out.returncode == 0, out.stderr
    (entry,) = json.loads(out.stdout)["masters"]
    assert entry["address"] == masters, entry
    assert "0.0.0.0" not in out.stdout, out.stdout


def test_the_listening_line_names_the_socket_too(tmp_path: Path,
                                                processes: list[ServerProcess]) -> None:
    """``listening on ADVERTISED (bound 0.0.0.0:PORT)``: scripts take the first address,
    an operator sees both."""
    port = free_port()
    ts = ServerProcess(0, str(tmp_path / "ts"), str(tmp_path / "traces"),
                       str(tmp_path / "ts.log"), port=port)
    processes.append(ts)
    spawn(ts, [sys.executable, "-m", "revivify.impl.servers.tserver", "--fs-root", ts.fs_root,
               "--rpc-bind", f"0.0.0.0:{port}", "--rpc-advertised-address",
               f"127.0.0.1:{port}", "--webserver-bind", "off"])
    assert ts.proc is not None and ts.proc.stdout is not None
    line = ts.proc.stdout.readline().decode().strip()
    assert line.endswith(f" listening on 127.0.0.1:{port} (bound 0.0.0.0:{port})"), line
    assert os.path.isdir(ts.fs_root)
