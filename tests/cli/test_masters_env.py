"""REVIVIFY_MASTERS: the masters for the client commands from the environment (as etcdctl's
ETCDCTL_ENDPOINTS); the command line wins over it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from revivify.impl.cli.common import Parser, masters_flags, parse_args


def _parse(argv: list[str]) -> Any:
    return parse_args(Parser(prog="t", parents=[masters_flags()]), argv)


def test_the_environment_gives_the_masters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIVIFY_MASTERS", "127.0.0.1:7051, 127.0.0.1:7052")
    args = _parse([])
    assert args.masters == ["127.0.0.1:7051", "127.0.0.1:7052"]


def test_the_command_line_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REVIVIFY_MASTERS", "not an address")
    args = _parse(["--masters", "127.0.0.1:9"])
    assert args.masters == ["127.0.0.1:9"]


def test_a_bad_environment_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REVIVIFY_MASTERS", "nohost")
    assert _parse([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("t: REVIVIFY_MASTERS: ") and err.count("\n") == 1, err


def test_without_either_the_flag_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REVIVIFY_MASTERS", raising=False)
    assert _parse([]) == 2


def test_a_real_command_reads_it() -> None:
    """Through the CLI: the masters named only in the environment are the ones asked."""
    env = {"REVIVIFY_MASTERS": "127.0.0.1:1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "table", "list",
                           "--deadline", "1"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 2 and "127.0.0.1:1" in done.stderr, done.stderr
