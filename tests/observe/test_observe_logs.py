"""The log flags of ``tserver run`` and ``master run`` (impl/observe/logs.py): the file and
its rotation, the JSON format, the tail, stderr, and bad values refused in one line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from revivify.impl.observe.logs import (
    add_log_flags,
    log_settings,
    remove_logging,
    setup_logging,
    tail_handler,
)

TSERVER = [sys.executable, "-m", "revivify.impl.servers.tserver"]
MASTER = [sys.executable, "-m", "revivify.impl.servers.master"]


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_log_flags(p, "tserver")
    return p.parse_args(list(argv))


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    try:
        yield
    finally:
        remove_logging()
        root.setLevel(level)


def test_defaults_info_to_the_file_under_fs_root(tmp_path: Path) -> None:
    s = log_settings(args(), str(tmp_path), "master")
    assert s.level == logging.INFO and not s.json and s.backups == 5
    assert s.path == os.path.join(str(tmp_path), "logs", "master.log")
    assert log_settings(args("--log-file", "-"), str(tmp_path), "master").path is None


def test_the_file_rotates_by_size_and_keeps_log_files(tmp_path: Path,
                                                      restore_logging: None) -> None:
    path = setup_logging(args("--log-max-mb", "0.002", "--log-files", "2"), str(tmp_path),
                         "tserver")
    assert path is not None
    log = logging.getLogger("revivify.test.rotation")
    for n in range(200):
        log.info("event %04d %s", n, "x" * 60)
    names = sorted(os.listdir(os.path.dirname(path)))
    assert names == ["tserver.log", "tserver.log.1", "tserver.log.2"]
    for name in names:
        assert os.path.getsize(os.path.join(os.path.dirname(path), name)) <= 0.002 * (1 << 20)
    with open(path) as f:
        assert "event 0199" in f.read()
    tail = tail_handler()
    assert tail is not None
    lines = tail.tail(3)
    assert len(lines) == 3 and "event 0199" in lines[-1] and "INFO" in lines[-1]


def test_json_lines_parse_and_carry_level_logger_and_message(
        tmp_path: Path, restore_logging: None) -> None:
    path = setup_logging(args("--log-format", "json"), str(tmp_path), "tserver")
    assert path is not None
    log = logging.getLogger("revivify.test.json")
    log.info("tablet %s: won the election of term %d", "t1", 3)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("it failed")
    with open(path) as f:
        docs = [json.loads(line) for line in f]
    assert docs[0]["level"] == "INFO" and docs[0]["logger"] == "revivify.test.json"
    assert docs[0]["message"] == "tablet t1: won the election of term 3"
    assert docs[0]["time"].endswith("+00:00")
    assert docs[1]["level"] == "ERROR" and "ValueError: boom" in docs[1]["exception"]


@pytest.mark.parametrize("command", [TSERVER, MASTER])
@pytest.mark.parametrize("flags, message", [
    (["--log-level", "LOUD"], "--log-level"),
    (["--log-format", "xml"], "--log-format"),
    (["--log-max-mb", "0"], "--log-max-mb"),
    (["--log-files", "many"], "--log-files"),
])
def test_bad_values_exit_2_with_one_line(tmp_path: Path, command: list[str],
                                         flags: list[str], message: str) -> None:
    base = ["--fs-root", str(tmp_path / "srv"), "--rpc-bind", "127.0.0.1:7999"]
    out = subprocess.run([*command, *base, *flags], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
