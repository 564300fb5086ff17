"""``revivify replica copy --wait``: its progress for a person (a rich bar on a terminal's
stderr), for a script (a line per change of phase, retries or error) and for ``--json``
(nothing on stderr), against scripted client calls (the command's three calls replaced by
fakes: what the servers answer is tested in tests/integration/test_copy.py)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator

import pytest

from revivify.impl.cli import copy as copy_command
from revivify.impl.cli import replica
from revivify.impl.cli.main import main
from revivify.impl.tserver.api import CopyInfo, CopyList, ReplicaInfo, ServerStatus

SOURCE, DESTINATION = "127.0.0.1:7051", "127.0.0.1:7053"
MB = 1 << 20


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _info(phase: str, done: int, *, retries: int = 0) -> CopyInfo:
    return CopyInfo("t1", "src", SOURCE, phase, done, 8 * MB, done // MB, 8, 1.5, 4.0 * MB,
                    retries)


# What ListCopies answers at each look: the phases in order, a retry in the middle, then
# the copy gone from the list (it ended).
LOOKS = [_info("begin", 0), _info("blocks", 2 * MB), _info("blocks", 4 * MB),
         _info("blocks", 5 * MB, retries=1), _info("blocks", 8 * MB, retries=1),
         _info("done", 8 * MB, retries=1)]


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CopyInfo]]:
    """The copy's client calls answered from LOOKS; the final state RUNNING."""
    looks = list(LOOKS)

    async def copy_replica(source: str, destination: str, tablet_id: str) -> str:
        assert (source, destination, tablet_id) == (SOURCE, DESTINATION, "t1")
        return "READY"

    async def list_copies(address: str) -> CopyList:
        return CopyList([looks.pop(0)] if looks else [], 4)

    async def server_status(address: str) -> ServerStatus:
        running = ReplicaInfo("t1", "RUNNING", "", "FOLLOWER", 2, "", "", (2, 9), 9, 9, 1,
                              [], "VOTER")
        return ServerStatus("dst", address, [running])

    monkeypatch.setattr(replica, "copy_replica", copy_replica)
    monkeypatch.setattr(replica, "list_copies", list_copies)
    monkeypatch.setattr(replica, "server_status", server_status)
    monkeypatch.setattr(replica, "COPY_POLL_SECONDS", 0.0)
    yield looks
    assert not looks, "the command stopped looking before the copy ended"


COPY = ("replica", "copy", "--from", SOURCE, "--to", DESTINATION, "--tablet", "t1", "--wait")


def test_a_terminal_gets_a_bar_with_phase_bytes_and_rate(
        scripted: list[CopyInfo], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("TERM", "xterm")
    assert main(list(COPY)) == 0
    drawn = err.getvalue()
    assert "copying t1 (blocks)" in drawn or "copying t1 (done)" in drawn
    assert "8.4 MB" in drawn  # rich's sizes are decimal: 8 MiB = 8.4 MB
    assert "/s" in drawn  # the rate column
    assert "t1 on 127.0.0.1:7053: RUNNING" in capsys.readouterr().out


def test_a_pipe_gets_a_line_per_change_not_per_look(
        scripted: list[CopyInfo], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(list(COPY)) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    # begin, blocks, blocks with a retry, done: the two looks that only moved bytes are
    # not printed.
    assert [line.split()[1] for line in lines] == ["begin", "blocks", "blocks", "done"]
    assert "retries 1" in lines[2] and "retries" not in lines[1]
    assert "\x1b[" not in captured.err  # no terminal codes into a pipe
    assert captured.out.strip() == "tablet t1 on 127.0.0.1:7053: RUNNING"


def test_json_prints_the_document_and_nothing_on_stderr(
        scripted: list[CopyInfo], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*COPY, "--json"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert json.loads(captured.out) == {"tablet_id": "t1", "state": "RUNNING",
                                        "bytes": 8 * MB}


def test_copy_list_is_a_table(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    async def list_copies(address: str) -> CopyList:
        return CopyList([_info("blocks", 2 * MB, retries=1)], 4)

    monkeypatch.setattr(copy_command, "list_copies", list_copies)
    assert main(["copy", "list", "--tserver", DESTINATION]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["TABLET", "PHASE", "DONE", "MB", "TOTAL", "MB", "MB/S",
                              "FILES", "FROM", "RETRIES", "ERROR"]
    assert row.split() == ["t1", "blocks", "2.0", "8.0", "4.0", "2/8", SOURCE, "1", "-"]


def test_the_verdict_waits_for_the_end_of_the_copy_to_be_applied(
        scripted: list[CopyInfo], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The server drops the copy from ListCopies before it applies its end to the replica:
    COPYING, then STARTING, then RUNNING is a success, not a failed copy."""
    states = ["COPYING", "COPYING", "STARTING", "RUNNING"]

    async def server_status(address: str) -> ServerStatus:
        state = states.pop(0)
        role = "FOLLOWER" if state == "RUNNING" else ""
        info = ReplicaInfo("t1", state, "", role, 2, "", "", (2, 9), 9, 9, 1, [], "VOTER")
        return ServerStatus("dst", address, [info])

    monkeypatch.setattr(replica, "server_status", server_status)
    assert main([*COPY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "RUNNING" and not states
