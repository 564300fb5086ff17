"""render.py's two audiences: rich tables and progress bars on a terminal, the plain forms
scripts parse everywhere else (issue 19 "Output fit for a person"); and the follower-read
flag's usage errors."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from revivify.impl.cli import render

HEADERS = ["TABLET", "STATE", "TERM"]
ROWS: list[list[object]] = [["t-1", "RUNNING", 3], ["t-22", None, 12]]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_when_stdout_is_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    assert not render.is_terminal()  # pytest captures stdout: not a terminal
    assert render.table(HEADERS, ROWS) == render.plain_table(HEADERS, ROWS) == (
        "TABLET  STATE    TERM\n"
        "t-1     RUNNING  3\n"
        "t-22    -        12")


def test_rich_on_a_terminal_keeps_column_names_order_and_cells(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", _Tty())
    monkeypatch.setenv("TERM", "xterm")
    assert render.is_terminal()
    drawn = render.table(HEADERS, ROWS)
    assert drawn != render.plain_table(HEADERS, ROWS)
    header = next(line for line in drawn.splitlines() if "TABLET" in line)
    assert header.index("TABLET") < header.index("STATE") < header.index("TERM")
    for cell in ("t-1", "RUNNING", "t-22", "12", "-"):
        assert cell in drawn
    monkeypatch.setenv("TERM", "dumb")  # a dumb terminal is not a person's
    assert render.table(HEADERS, ROWS) == render.plain_table(HEADERS, ROWS)


def test_progress_without_a_terminal_is_one_line_per_note(
        capsys: pytest.CaptureFixture[str]) -> None:
    with render.progress("retiring", 2) as shown:
        assert type(shown) is render.Progress
        shown.note("moved t1 t-1 off ts (1/2)")
        shown.advance()
        shown.set_total(3)
    assert capsys.readouterr().err == "moved t1 t-1 off ts (1/2)\n"
    assert (shown.done, shown.total) == (1, 3)


def test_progress_on_a_terminal_draws_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("TERM", "xterm")
    with render.progress("retiring abc", 2) as shown:
        assert type(shown) is not render.Progress
        shown.note("moved t1 t-1 off ts (1/2)")
        shown.advance()
    out = err.getvalue()
    assert "moved t1 t-1 off ts (1/2)" in out and "retiring abc" in out and "1/2" in out
    with render.progress("retiring abc", 2, enabled=False) as plain:  # --json: no bar
        assert type(plain) is render.Progress


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_freshness_must_be_seconds(value: str) -> None:
    r = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "table", "list",
                        "--masters", "127.0.0.1:1", "--freshness", value],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--freshness" in r.stderr and "Traceback" not in r.stderr


def test_table_describe_is_a_table_one_row_per_replica() -> None:
    from revivify.impl.master.api import (
        ReplicaLocationInfo,
        TableLocationsReply,
        TabletLocationInfo,
    )

    def replicas(leader: str, dead: str = "") -> list[ReplicaLocationInfo]:
        return [ReplicaLocationInfo(u, f"127.0.0.1:705{i}", "VOTER", u == leader, u != dead)
                for i, u in enumerate("abc")]

    reply = TableLocationsReply("tid", "t1", 2, 2, [
        TabletLocationInfo("tab-1", 1, "RUNNING", 4, replicas("b", dead="c"),
                           moving_from="c" * 32),
        TabletLocationInfo("tab-0", 0, "RUNNING", 3, replicas("a"))], num_replicas=3)
    head, *lines = render.table_locations_text(reply).splitlines()
    assert head == "table t1 tid v2: 2 tablets, 3 replicas each"
    assert lines[0].split() == ["PARTITION", "TABLET", "STATE", "TERM", "REPLICA",
                                "ADDRESS", "MEMBER", "ROLE", "LIVE"]
    rows = [line.split() for line in lines[1:]]
    assert len(rows) == 6 and [r[1] for r in rows] == ["tab-0"] * 3 + ["tab-1"] * 3
    assert rows[0] == ["0", "tab-0", "RUNNING", "3", "a", "127.0.0.1:7050", "VOTER",
                       "LEADER", "yes"]
    assert rows[1][-2:] == ["FOLLOWER", "yes"]
    assert rows[4][-2:] == ["LEADER", "yes"] and rows[5][-1] == "DEAD"
    assert "(moving off cccccccc)" in lines[4]
