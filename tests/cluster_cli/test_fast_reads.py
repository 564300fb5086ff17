"""The masters' reads on the blocking fast path (impl/cli/oneshot.py: no trio) against a
real local cluster (3 masters, 1 tablet server): ``table list`` (with and without
``--freshness``), ``table describe``, ``tserver list`` and ``master list`` print, exit and
complain exactly as the trio client's path does (forced here by a fault file, which the
fast path always leaves to the trio client); the leader is found through a follower and
past a dead master, in one round, without trio; every master down is the trio path's
error and exit code; a silent master costs the command its deadline once, not a fast
attempt plus the deadline.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from clusterproc import as_json, cleaned_up, eventually, here, ok, ok_here

from revivify.impl.cli import oneshot
from revivify.impl.cli.common import BACKSTOP_SLACK
from revivify.impl.master import api
from revivify.impl.processes.control import free_port

FORCE_TRIO = {"REVIVIFY_FAULT_FILE": "/nonexistent/faults.json"}  # no faults; not fast


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running cluster with one table ``t``."""
    root = str(tmp_path_factory.mktemp("fast") / "c")
    with cleaned_up(root):
        ok("cluster", "start", "--root", root, "--num-masters", "3", "--num-tservers", "1")
        ok_here("table", "create", "t", "--root", root, "--replicas", "1", "--deadline", "60")
        # RUNNING before the tests compare two answers (a state that changes between the
        # two calls is no difference between the paths).
        eventually("table t RUNNING", lambda: [t["state"] for t in as_json(ok_here(
            "table", "list", "--root", root, "--json"))["tables"]] == ["RUNNING"])
        yield root


def masters_by_role(root: str) -> dict[str, list[str]]:
    rows = as_json(ok_here("master", "list", "--root", root, "--json"))["masters"]
    roles: dict[str, list[str]] = {}
    for row in rows:
        roles.setdefault(row["role"], []).append(row["address"])
    return roles


# Numbers that change from one call to the next: seconds since a heartbeat, a follower
# read's staleness and the catalog index it was served at, the attempts a retry loop made
# by its deadline.
VOLATILE = re.compile(r"(?<![\d.])\d+\.\d+(?![\d.])|(?<=catalog index )\d+"
                      r"|(?<=\"applied_index\":)\d+|(?<=after )\d+(?= attempt)")


def both_paths(monkeypatch: pytest.MonkeyPatch, argv: list[str]
               ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str],
                          list[Any]]:
    """The command run as it runs (fast path first), then with the trio path forced; and
    what the fast path's calls returned (None: it deferred)."""
    answers: list[Any] = []

    def recording(call: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            answers.append(call(*args, **kwargs))
            return answers[-1]
        return recorded

    with monkeypatch.context() as patched:
        patched.setattr(oneshot, "master_read", recording(oneshot.master_read))
        patched.setattr(oneshot, "master_statuses", recording(oneshot.master_statuses))
        fast = here(*argv)
    with monkeypatch.context() as patched:
        for name, value in FORCE_TRIO.items():
            patched.setenv(name, value)
        slow = here(*argv)
    return fast, slow, answers


def same(a: subprocess.CompletedProcess[str], b: subprocess.CompletedProcess[str]) -> None:
    assert (a.returncode, VOLATILE.sub("N", a.stdout), VOLATILE.sub("N", a.stderr)) == \
        (b.returncode, VOLATILE.sub("N", b.stdout), VOLATILE.sub("N", b.stderr))


READS = [
    ["table", "list"],
    ["table", "list", "--freshness", "30"],
    ["table", "describe", "t"],
    ["table", "describe", "t", "--freshness", "30"],
    ["tserver", "list"],
    ["master", "list"],
]


@pytest.mark.parametrize("json_flag", [["--json"], []], ids=["json", "text"])
@pytest.mark.parametrize("read", READS, ids=lambda argv: " ".join(argv))
def test_a_read_answers_on_the_fast_path_as_on_the_trio_path(
        root: str, monkeypatch: pytest.MonkeyPatch, read: list[str],
        json_flag: list[str]) -> None:
    fast, slow, answers = both_paths(monkeypatch, [*read, "--root", root, *json_flag])
    assert fast.returncode == 0, fast.stderr
    assert answers and all(a is not None for a in answers), "the fast path deferred"
    same(fast, slow)


def test_a_refusal_is_the_trio_paths(root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A definite no (NOT_FOUND) is the trio path's Rejected: the fast path defers."""
    fast, slow, answers = both_paths(monkeypatch, ["table", "describe", "nosuch", "--root",
                                                   root])
    assert answers == [None]
    assert fast.returncode == 1 and "NOT_FOUND" in fast.stderr
    same(fast, slow)


def test_the_leader_is_found_through_a_follower_and_past_a_dead_master(root: str) -> None:
    follower = masters_by_role(root)["FOLLOWER"][0]
    dead = f"127.0.0.1:{free_port()}"
    for masters in ([follower], [dead, follower]):
        listed = oneshot.master_read(masters, api.MASTER_LIST_TABLES,
                                     api.ListTablesRequest(None), api.TableList,
                                     call_timeout=2.0, seconds=5.0)
        assert listed is not None, masters
        assert [t.name for t in listed.tables] == ["t"]
    # And the command, in a process of its own: a follower named alone, answered without
    # importing trio (the import budget's way: -X importtime, tests/cli/test_import_budget).
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "revivify.impl.cli.main",
                           "table", "list", "--masters", follower, "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and as_json(done)["tables"][0]["name"] == "t", done.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "revivify.impl.cli.oneshot" in imported and "trio" not in imported


def test_every_master_down_is_the_trio_paths_error(monkeypatch: pytest.MonkeyPatch) -> None:
    down = ",".join(f"127.0.0.1:{free_port()}" for _ in range(2))
    for read in READS:
        fast, slow, answers = both_paths(monkeypatch, [*read, "--masters", down,
                                                       "--deadline", "2"])
        assert all(a is None for a in answers)
        assert fast.returncode == 2, (read, fast)
        # (master list's rows say it first; a follower read names its last error)
        if read != ["master", "list"] and "--freshness" not in read:
            assert fast.stdout == ""
            assert fast.stderr == f"revivify {' '.join(read[:2])}: no master answered at " \
                f"{down.replace(',', ', ')} (connection refused)\n", fast.stderr
        same(fast, slow)


@pytest.fixture
def silent() -> Iterator[str]:
    """An address that takes connections (the kernel completes them) and never answers:
    a stopped or hung master."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("read", [["table", "list"], ["master", "list"]],
                         ids=lambda argv: " ".join(argv))
def test_a_silent_master_costs_the_deadline_once(silent: str, read: list[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast attempt's wait comes out of the --deadline: the command ends by it (and its
    backstop), not a fast attempt later, and says what the trio path alone says. (``table
    list`` retries until the deadline; ``master list`` gives each master one call timeout,
    and ends then.)"""
    deadline = 4.0
    argv = [*read, "--masters", silent, "--deadline", f"{deadline:g}"]
    started = time.monotonic()
    fast = here(*argv)
    took = time.monotonic() - started
    assert fast.returncode == 2
    assert took <= deadline + BACKSTOP_SLACK + 0.5, took
    if read == ["table", "list"]:
        assert took >= deadline - 0.5, took
    _, slow, _ = both_paths(monkeypatch, argv)
    same(fast, slow)
