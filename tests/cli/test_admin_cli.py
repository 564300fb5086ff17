"""The server commands of ``revivify`` (tserver, tablet, row), run in-process.

``main([...])`` runs in the test's thread (it calls trio.run itself), against fake tablet
servers (tests/client/fake_tserver.py) served over real TCP on 127.0.0.1 by a trio loop in
a second thread. Checked: exit codes (0 yes, 1 no, 2 bad usage or unreachable), the shape
of every --json document, and that every error is one line on stderr, never a traceback.
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

from fake_tserver import FakeTablet, ThreadedCluster, free_port, threaded_cluster

from revivify.impl.cli import tserver as cli_tserver
from revivify.impl.cli.main import main

_ids = itertools.count(1)


@pytest.fixture(scope="module")
def fake() -> Iterator[ThreadedCluster]:
    with threaded_cluster(3) as running:
        yield running


@pytest.fixture
def tablet(fake: ThreadedCluster) -> FakeTablet:
    """A fresh tablet on all three fake servers, led by the first."""
    name = f"cli-tablet-{next(_ids)}"
    made: FakeTablet = fake.run_sync(lambda: fake.cluster.add_tablet(name))
    return made


class Run:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code = code
        self.out = out
        self.err = err

    def json(self) -> Any:
        return json.loads(self.out)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Run:
    code = main(list(args))
    captured = capsys.readouterr()
    result = Run(code, captured.out, captured.err)
    assert "Traceback" not in result.err
    if result.err:
        assert result.err.count("\n") == 1, result.err  # one line
    if "--json" in args and result.out:
        result.json()  # one JSON document
    return result


def servers(fake: ThreadedCluster) -> str:
    return ",".join(fake.cluster.addresses)


# ---------------------------------------------------------------------------- tserver


def test_tserver_status(capsys: pytest.CaptureFixture[str], fake: ThreadedCluster,
                        tablet: FakeTablet) -> None:
    address = fake.cluster.addresses[0]
    r = run(capsys, "tserver", "status", "--tserver", address, "--json")
    assert r.code == 0
    doc = r.json()
    assert set(doc) == {"uuid", "address", "replicas"}
    assert (doc["uuid"], doc["address"]) == ("uuid-1", address)
    mine = [x for x in doc["replicas"] if x["tablet_id"] == tablet.tablet_id]
    assert mine and mine[0]["role"] == "LEADER" and mine[0]["last_opid"] == [1, 1]
    text = run(capsys, "tserver", "status", "--tserver", address)
    assert text.code == 0 and "uuid-1" in text.out and tablet.tablet_id in text.out


def test_tserver_status_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    r = run(capsys, "tserver", "status", "--tserver", address, "--json")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("revivify tserver status: cannot reach " + address)


def test_tserver_run_hook_missing(capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_tserver, "TSERVER_MAIN", "revivify.impl.tserver.no_such_module")
    r = run(capsys, "tserver", "run", "--fs-root", "/nowhere")
    assert r.code == 2
    assert "revivify tserver run: not available" in r.err


def test_tserver_run_hook_hands_over(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    seen: list[list[str]] = []
    module = types.ModuleType("fake_tserver_main")
    def run_main(argv: list[str]) -> int:
        seen.append(argv)
        return 0

    module.run_main = run_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_tserver_main", module)
    monkeypatch.setattr(cli_tserver, "TSERVER_MAIN", "fake_tserver_main")
    assert run(capsys, "tserver", "run", "--fs-root", "/x").code == 0
    assert seen == [["--fs-root", "/x"]]


# ---------------------------------------------------------------------------- tablet


def test_tablet_create(capsys: pytest.CaptureFixture[str], fake: ThreadedCluster) -> None:
    r = run(capsys, "tablet", "create", "--tservers", servers(fake), "--replicas", "3",
            "--json")
    assert r.code == 0
    doc = r.json()
    tablet_id = doc["tablet_id"]
    assert len(tablet_id) == 32
    assert [p["uuid"] for p in doc["peers"]] == ["uuid-1", "uuid-2", "uuid-3"]
    hosted = fake.run_sync(lambda: [tablet_id in s.hosted for s in fake.cluster.servers])
    assert hosted == [True, True, True]
    text = run(capsys, "tablet", "create", "--tservers", servers(fake), "--replicas", "2")
    assert text.code == 0 and len(text.out.strip()) == 32


def test_tablet_create_too_many_replicas(capsys: pytest.CaptureFixture[str],
                                         fake: ThreadedCluster) -> None:
    r = run(capsys, "tablet", "create", "--tservers", servers(fake), "--replicas", "4")
    assert r.code == 2 and "4 replicas" in r.err


def test_tablet_create_exists_is_a_no(capsys: pytest.CaptureFixture[str],
                                      fake: ThreadedCluster, tablet: FakeTablet) -> None:
    r = run(capsys, "tablet", "create", "--tservers", servers(fake), "--replicas", "1",
            "--tablet-id", tablet.tablet_id)
    assert r.code == 1 and "already exists" in r.err


def test_tablet_status(capsys: pytest.CaptureFixture[str], fake: ThreadedCluster,
                       tablet: FakeTablet) -> None:
    dead = f"127.0.0.1:{free_port()}"
    r = run(capsys, "tablet", "status", "--tservers", f"{servers(fake)},{dead}",
            "--tablet", tablet.tablet_id, "--json")
    assert r.code == 0
    doc = r.json()
    assert doc["tablet_id"] == tablet.tablet_id
    assert doc["leader"] == "uuid-1"
    assert doc["leader_address"] == fake.cluster.addresses[0]
    rows = doc["replicas"]
    assert [x["role"] for x in rows[:3]] == ["LEADER", "FOLLOWER", "FOLLOWER"]
    assert all(x["term"] == 1 and x["last_opid"] == [1, 1] and x["commit_index"] == 1
               for x in rows[:3])
    assert rows[3]["address"] == dead and rows[3]["live"] is False
    assert rows[3]["error"].startswith("unreachable")
    text = run(capsys, "tablet", "status", "--tservers", servers(fake), "--tablet",
               tablet.tablet_id)
    assert text.code == 0 and "leader: uuid-1" in text.out and "FOLLOWER" in text.out


def test_tablet_status_unknown_tablet(capsys: pytest.CaptureFixture[str],
                                      fake: ThreadedCluster) -> None:
    r = run(capsys, "tablet", "status", "--tservers", servers(fake), "--tablet", "nope")
    assert r.code == 1 and "tablet nope is not hosted" in r.err  # a definite "no"


def test_change_config_add_then_stale_cas_refused(
        capsys: pytest.CaptureFixture[str], fake: ThreadedCluster) -> None:
    name = f"cli-tablet-{next(_ids)}"
    fake.run_sync(lambda: fake.cluster.add_tablet(name, fake.cluster.servers[:2]))
    third = fake.cluster.addresses[2]
    r = run(capsys, "tablet", "change-config", "--tservers", servers(fake), "--tablet", name,
            "add", "uuid-3", third, "--non-voter", "--promote", "--json")
    assert r.code == 0, r.err
    doc = r.json()
    assert doc["config_index"] == 2
    assert doc["change"] == {"kind": "ADD", "uuid": "uuid-3", "address": third,
                             "member_type": "NON_VOTER", "promote": True}
    stale = run(capsys, "tablet", "change-config", "--tservers", servers(fake), "--tablet",
                name, "remove", "uuid-3", "--cas-config-index", "0", "--json")
    assert stale.code == 1
    assert stale.json()["refused"]["reason"] == "cas_mismatch"
    assert "refused" in stale.err
    ok = run(capsys, "tablet", "change-config", "--tservers", servers(fake), "--tablet",
             name, "promote", "uuid-3")
    assert ok.code == 0 and "index 3" in ok.out


@pytest.mark.parametrize("form, needle", [
    (["remove", "uuid-3", "127.0.0.1:7050"], "takes a UUID only"),
    (["add", "uuid-3"], "add needs UUID and HOST:PORT"),
    (["add", "uuid-3", "127.0.0.1:7050", "--promote"], "--promote"),
    (["promote", "uuid-3", "--non-voter"], "--non-voter"),
    (["demote", "uuid-3"], "invalid choice"),
    (["add", "uuid-3", "nohostport"], "invalid address"),
    (["remove", "uuid-3", "--cas-config-index", "-1"], "--cas-config-index"),
])
def test_change_config_bad_forms(capsys: pytest.CaptureFixture[str], form: list[str],
                                 needle: str) -> None:
    r = run(capsys, "tablet", "change-config", "--tservers", "127.0.0.1:7050", "--tablet",
            "t", *form)
    assert r.code == 2 and needle in r.err


def test_step_down(capsys: pytest.CaptureFixture[str], fake: ThreadedCluster,
                   tablet: FakeTablet) -> None:
    r = run(capsys, "tablet", "step-down", "--tservers", servers(fake), "--tablet",
            tablet.tablet_id, "--new-leader", "uuid-3", "--json")
    assert r.code == 0
    assert r.json() == {"tablet_id": tablet.tablet_id, "stepped_down": "uuid-1",
                        "new_leader": "uuid-3"}
    assert fake.run_sync(lambda: tablet.leader) == "uuid-3"


# ---------------------------------------------------------------------------- row


def test_rows(capsys: pytest.CaptureFixture[str], fake: ThreadedCluster,
              tablet: FakeTablet) -> None:
    flags = ["--tservers", servers(fake), "--tablet", tablet.tablet_id]
    put = run(capsys, "row", "put", "k1", "välue", *flags, "--json")
    assert put.code == 0
    assert put.json() == {"key": "k1", "value": "välue", "index": 2, "duplicate": False}
    assert run(capsys, "row", "put", "k2", "two", *flags).code == 0
    get = run(capsys, "row", "get", "k1", *flags)
    assert (get.code, get.out) == (0, "välue\n")
    assert run(capsys, "row", "get", "k1", *flags, "--json").json() == {"key": "k1",
                                                                      "value": "välue"}
    scan = run(capsys, "row", "scan", *flags, "--json")
    assert scan.json() == {"rows": [{"key": "k1", "value": "välue"},
                                    {"key": "k2", "value": "two"}]}
    text = run(capsys, "row", "scan", *flags, "--start", "k2")
    assert text.out == "k2\ttwo\n"
    limited = run(capsys, "row", "scan", *flags, "--limit", "1", "--json")
    assert [x["key"] for x in limited.json()["rows"]] == ["k1"]
    deleted = run(capsys, "row", "delete", "k1", *flags, "--json")
    assert deleted.code == 0 and set(deleted.json()) == {"key", "index", "duplicate"}
    missing = run(capsys, "row", "get", "k1", *flags, "--json")
    assert missing.code == 1
    assert missing.json() == {"key": "k1", "value": None}
    assert missing.err == "revivify row get: key 'k1' not found\n"


def test_rows_hex(capsys: pytest.CaptureFixture[str], fake: ThreadedCluster,
                  tablet: FakeTablet) -> None:
    flags = ["--tservers", servers(fake), "--tablet", tablet.tablet_id, "--hex"]
    assert run(capsys, "row", "put", "00ff", "deadbeef", *flags).code == 0
    assert fake.run_sync(lambda: dict(tablet.rows)) == {b"\x00\xff": b"\xde\xad\xbe\xef"}
    get = run(capsys, "row", "get", "00ff", *flags, "--json")
    assert get.json() == {"key": "00ff", "value": "deadbeef"}
    bad = run(capsys, "row", "get", "zz", *flags)
    assert bad.code == 2 and "KEY 'zz' is not valid hex" in bad.err


def test_row_unreachable_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{free_port()}"
    r = run(capsys, "row", "get", "k", "--tservers", address, "--tablet", "t",
            "--deadline", "0.5")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("revivify row get: read: ")
    assert f"cannot connect to {address}" in r.err


def test_row_unknown_tablet(capsys: pytest.CaptureFixture[str], fake: ThreadedCluster
                            ) -> None:
    r = run(capsys, "row", "put", "k", "v", "--tservers", servers(fake), "--tablet", "nope")
    assert r.code == 1 and "tablet nope is not hosted" in r.err  # a definite "no"


# ---------------------------------------------------------------------------- usage


@pytest.mark.parametrize("args, needle", [
    (["tserver"], "required"),
    (["tserver", "status"], "--tserver"),
    (["tserver", "status", "--tserver", "localhost"], "no port"),
    (["tserver", "status", "--tserver", "h:99999"], "outside 1..65535"),
    (["tablet", "create"], "--tservers"),
    (["tablet", "create", "--tservers", "h:1", "--replicas", "0"], "--replicas"),
    (["tablet", "status", "--tservers", "h:1"], "--tablet"),
    (["tablet", "status", "--tservers", ",", "--tablet", "t"], "no address"),
    (["tablet", "frobnicate"], "invalid choice"),
    (["row", "get", "--tservers", "h:1", "--tablet", "t"], "KEY"),
    (["row", "scan", "--tservers", "h:1", "--tablet", "t", "--limit", "-1"], "--limit"),
    (["row", "put", "k", "v", "--tservers", "h:1", "--tablet", "t", "--deadline", "0"],
     "--deadline"),
    (["row", "put", "00", "zz", "--tservers", "h:1", "--tablet", "t", "--hex"],
     "VALUE 'zz' is not valid hex"),
])
def test_bad_usage(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    r = run(capsys, *args)
    assert r.code == 2, r.err
    assert needle in r.err
    assert r.out == ""


@pytest.mark.parametrize("args, flags", [
    (["tserver", "status"], ["--tserver", "--json", "--deadline"]),
    (["tablet", "create"], ["--tservers", "--replicas", "--tablet-id", "--json"]),
    (["tablet", "status"], ["--tservers", "--tablet", "--json"]),
    (["tablet", "change-config"], ["--cas-config-index", "--non-voter", "--promote",
                                   "add", "remove", "promote"]),
    (["tablet", "step-down"], ["--new-leader", "--tablet"]),
    (["row", "put"], ["KEY", "VALUE", "--hex", "--json"]),
    (["row", "get"], ["KEY", "--hex"]),
    (["row", "delete"], ["KEY"]),
    (["row", "scan"], ["--start", "--end", "--limit", "--hex"]),
])
def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str], args: list[str],
                                   flags: list[str]) -> None:
    r = run(capsys, *args, "--help")
    assert r.code == 0
    for flag in flags:
        assert flag in r.out


def test_top_level_usage_lists_the_server_commands(capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    r = run(capsys, "--help")
    assert r.code == 0
    for command in ("tserver", "tablet", "row", "prove", "explore", "trace"):
        assert command in r.out
