"""What ``revivify row put|delete`` says when a write fails, and the exit-code rule.

In-process ``main([...])`` against fake tablet servers over TCP on 127.0.0.1 (a trio loop in
a second thread: tests/client/fake_tserver.py), as tests/cli/test_admin_cli.py does. A write
that may have been applied is "unknown" (message: "may or may not have been applied"); one
that cannot have been is "failed"; an unknown tablet is a definite "no" (exit 1).
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from fake_tserver import FakeTablet, ThreadedCluster, threaded_cluster

from revivify.impl.cli.main import main
from revivify.impl.tserver import api

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def fake() -> Iterator[ThreadedCluster]:
    with threaded_cluster(3) as running:
        yield running


@pytest.fixture(autouse=True)
def no_failures_left(fake: ThreadedCluster) -> Iterator[None]:
    """Whatever a test armed is disarmed after it, passed or failed."""
    yield
    fail_leader(fake, [])


@pytest.fixture
def tablet(fake: ThreadedCluster) -> FakeTablet:
    name = f"outcome-tablet-{next(_ids)}"
    made: FakeTablet = fake.run_sync(lambda: fake.cluster.add_tablet(name))
    return made


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    # The error is the last stderr line; before it, at most the notice of a wait past 2 s
    # (render.announce_wait: a pipe gets one line), which a slow machine reaches.
    *before, _last = captured.err.splitlines() or [""]
    assert all("still waiting for an answer" in line for line in before), captured.err
    assert len(before) <= 1, captured.err
    doc = json.loads(captured.out) if "--json" in args and captured.out else None
    return code, doc, captured.err


def flags(fake: ThreadedCluster, tablet_id: str) -> list[str]:
    return ["--tservers", ",".join(fake.cluster.addresses), "--tablet", tablet_id,
            "--deadline", "5", "--call-timeout", "1"]


def fail_leader(fake: ThreadedCluster, failures: list[Any]) -> None:
    def arm() -> None:
        fake.cluster.server("uuid-1").fail_next[api.DATA_WRITE] = list(failures)
    fake.run_sync(arm)


def test_a_write_that_may_have_been_applied_is_unknown(
        capsys: pytest.CaptureFixture[str], fake: ThreadedCluster, tablet: FakeTablet) -> None:
    # Every attempt is applied, then its replication "aborted": maybe applied, each time.
    fail_leader(fake, [("apply", api.OperationAborted("leadership lost"))] * 100)
    code, doc, err = run(capsys, "row", "put", "k", "v", *flags(fake, tablet.tablet_id),
                         "--json")
    assert code == 2
    assert doc == {"key": "k", "value": "v", "outcome": "unknown", "error": doc["error"]}
    assert "may or may not have been applied" in err
    assert "may or may not have been applied" in doc["error"]


def test_a_write_refused_by_the_leader_is_failed_and_a_no(
        capsys: pytest.CaptureFixture[str], fake: ThreadedCluster, tablet: FakeTablet) -> None:
    fail_leader(fake, [api.InvalidArgument("no such thing")])
    code, doc, err = run(capsys, "row", "delete", "k", *flags(fake, tablet.tablet_id),
                         "--json")
    assert code == 1
    assert doc["outcome"] == "failed" and doc["key"] == "k" and "value" not in doc
    assert "no such thing" in err and "may or may not" not in err


def test_a_write_never_applied_is_failed_and_says_so(
        capsys: pytest.CaptureFixture[str], fake: ThreadedCluster, tablet: FakeTablet) -> None:
    fail_leader(fake, [api.TabletNotRunning(tablet.tablet_id, "BOOTSTRAPPING", "")] * 1000)
    code, doc, err = run(capsys, "row", "put", "k", "v", *flags(fake, tablet.tablet_id),
                         "--json")
    assert code == 2
    assert doc["outcome"] == "failed"
    assert "it was not applied" in err


def test_text_mode_prints_nothing_on_stdout_and_one_line(
        capsys: pytest.CaptureFixture[str], fake: ThreadedCluster, tablet: FakeTablet) -> None:
    fail_leader(fake, [("apply", api.OperationAborted("leadership lost"))] * 100)
    code = main(["row", "put", "k", "v", *flags(fake, tablet.tablet_id)])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith("revivify row put: ")
    assert "may or may not have been applied" in captured.err


def test_an_unknown_tablet_is_a_definite_no(capsys: pytest.CaptureFixture[str],
                                            fake: ThreadedCluster) -> None:
    code, doc, err = run(capsys, "row", "put", "k", "v", *flags(fake, "nope"), "--json")
    assert code == 1 and doc["outcome"] == "failed" and "not hosted" in err
    code, _, err = run(capsys, "row", "get", "k", *flags(fake, "nope"))
    assert code == 1 and "tablet nope is not hosted" in err
    code, doc, err = run(capsys, "tablet", "status", *flags(fake, "nope"), "--json")
    assert code == 1 and "tablet nope is not hosted" in err
    assert [r["answer"] for r in doc["replicas"]] == ["not hosted"] * 3


def test_a_successful_write_document_is_unchanged(
        capsys: pytest.CaptureFixture[str], fake: ThreadedCluster, tablet: FakeTablet) -> None:
    code, doc, err = run(capsys, "row", "put", "k", "v", *flags(fake, tablet.tablet_id),
                         "--json")
    assert code == 0 and err == ""
    assert doc == {"key": "k", "value": "v", "index": 2, "duplicate": False}


def test_call_timeout_flag_is_documented_and_checked(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    for argv in (["row", "put"], ["row", "get"], ["tablet", "status"]):
        assert main([*argv, "--help"]) == 0
        assert "--call-timeout" in capsys.readouterr().out
    code = main(["row", "get", "k", "--tservers", "h:1", "--tablet", "t", "--call-timeout",
                 "0"])
    assert code == 2 and "--call-timeout" in capsys.readouterr().err
