"""impl/trace.py writes what checker/traces.py reads: both through revivify.contract."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from revivify.checker.local import check_paths
from revivify.checker.traces import SCHEMA_VERSION
from revivify.contract.events import ARGS_TYPES, DurableState, Envelope
from revivify.impl.trace import SCHEMA_VERSION as WRITER_VERSION
from revivify.impl.trace import TraceContractError, TraceWriter, durable_state, startup_args


def test_writer_round_trip(tmp_path: Path) -> None:
    with TraceWriter(str(tmp_path), "node-a", 1, wall_ns=lambda: 42) as w:
        w.event("server_format")
        w.event("server_start")
        ready = durable_state(data_state="READY", cmeta={"term": 0, "voted_for": None,
                                                        "config_index": 0},
                              wal="LIVE", blocks="PRESENT")
        w.event("create_tablet", {"config_index": 0, "voters": ["node-a"]}, ready,
                tablet="t1")
        voted = dict(ready, cmeta={"term": 1, "voted_for": "node-a", "config_index": 0})
        w.event("start_election", {"me": "node-a"}, voted, tablet="t1")
        w.event("server_stop")
    with TraceWriter(str(tmp_path), "node-a", 2) as w:
        w.event("server_start")
        w.event("startup", {"case": "READY"}, voted, tablet="t1")
    report = check_paths([str(tmp_path)])
    assert report.findings == {}, report.text()
    assert report.events == 3 and report.frontiers == {0: 1}


def test_killed_writer_loses_nothing_written(tmp_path: Path) -> None:
    w = TraceWriter(str(tmp_path), "n", 1)
    w.event("server_start")
    # No close, no flush: a single os.write per event is already in the file.
    assert Path(w.path).read_text().count("\n") == 1
    w.close()


def test_writer_and_reader_agree_on_the_version() -> None:
    assert WRITER_VERSION == SCHEMA_VERSION == 4


def test_writer_v2_batches_config_step_down_and_a_damaged_startup(tmp_path: Path) -> None:
    """What version 2 added, written by the writer, checks clean: a leader appends a batch
    with one event, commits it with one, commits a config change, steps down; its WAL is
    damaged while it is down, and it restarts FAILED with a reason."""
    me = "node-a"
    cm = {"term": 0, "voted_for": None, "config_index": 0}

    def st(wal: tuple[int, int], term: int, cfg: int = 0, location: str = "LIVE",
           blocks: str = "PRESENT") -> dict[str, object]:
        return durable_state(data_state="READY", wal=location, wal_last_opid=wal,
                             blocks=blocks,
                             cmeta=dict(cm, term=term, voted_for=me if term else None,
                                        config_index=cfg))

    with TraceWriter(str(tmp_path), me, 1) as w:
        w.event("server_format")
        w.event("server_start")
        w.event("create_tablet", {"config_index": 0, "voters": [me]}, st((0, 0), 0),
                tablet="t1")
        w.event("start_election", {"me": me}, st((0, 0), 1), tablet="t1")
        w.event("become_leader", {"me": me, "t": 1}, st((0, 0), 1), tablet="t1")
        w.event("log_append", {"first_index": 1, "op_term": 1, "op_index": 4},
                st((1, 4), 1), tablet="t1")
        w.event("config_commit", {"config_index": 2, "voters": [me]}, st((1, 4), 1, 2),
                tablet="t1")
        w.event("step_down", {}, st((1, 4), 1, 2), tablet="t1")
        w.event("server_stop")
    with TraceWriter(str(tmp_path), me, 2) as w:
        w.event("server_start")
        w.event("startup", startup_args("FAILED", "WAL segment 2: bad checksum"),
                st((1, 4), 1, 2, location="DAMAGED"), tablet="t1")
    report = check_paths([str(tmp_path)])
    # A one-voter config: the leader's own vote is a majority (LeaderWithoutMajority),
    # and so is its own log (the batch is not committed here anyway).
    assert report.findings == {}, report.text()
    actions = report.coverage_summary()["actions"]
    assert all(actions[a] == 1 for a in ("log_append", "config_commit", "step_down",
                                         "startup"))
    assert report.frontiers == {0: 1}


def test_startup_args_helper() -> None:
    assert startup_args("READY") == {"case": "READY"}
    assert startup_args("FAILED", "3 blocks missing") == {"case": "FAILED",
                                                           "reason": "3 blocks missing"}
    with pytest.raises(ValueError):
        startup_args("FAILED")
    with pytest.raises(ValueError):
        startup_args("READY", "no")


def test_writer_builds_lines_through_the_contract(tmp_path: Path) -> None:
    """A writer bug (unknown event or field, a wrong type, a state where there is none)
    fails at the writer, naming the event and the field, and writes nothing; what it writes
    decodes into the contract's records."""
    st = durable_state(data_state="READY", wal="LIVE", blocks="PRESENT",
                       cmeta={"term": 1, "voted_for": None, "config_index": 0})
    bad: list[tuple[str, dict[str, object] | None, dict[str, object] | None, str | None,
                    str]] = [
        ("no_such_event", {}, st, "t1", "event"),
        ("commit", {"index": 1, "op_term": 1, "bogus": 2}, st, "t1", "args.bogus"),
        ("commit", {"index": "1", "op_term": 1}, st, "t1", "args.index"),
        ("create_tablet", {"config_index": 0, "voters": ["a", 7]}, st, "t1", "args.voters[1]"),
        ("learn_term", {}, st, "t1", "args"),
        ("commit", {"index": 1, "op_term": 1},
         dict(st, wal={"location": "ELSEWHERE", "last_opid": [0, 0]}), "t1",
         "state.wal.location"),
        ("commit", {"index": 1, "op_term": 1}, None, None, "tablet"),
        ("server_start", {}, None, "t1", "tablet"),
        ("server_start", {}, st, None, "state"),
        ("server_stop", {"reason": "x"}, None, None, "args.reason"),
    ]
    with TraceWriter(str(tmp_path), "n", 1) as w:
        for event, args, state, tablet, field in bad:
            with pytest.raises(TraceContractError) as exc:
                w.event(event, args, state, tablet=tablet)
            assert exc.value.event == event and exc.value.field == field, str(exc.value)
            assert f"{event!r}" in str(exc.value) and field in str(exc.value)
        assert w.lamport == 0 and Path(w.path).read_text() == ""
        w.event("server_start")
        w.event("commit", ARGS_TYPES["commit"](index=1, op_term=1),
                msgspec.convert(st, DurableState), tablet="t1")
        w.event("commit", {"index": 2, "op_term": 1}, st, tablet="t1")
    lines = Path(w.path).read_bytes().splitlines()
    envs = [msgspec.json.decode(x, type=Envelope) for x in lines]
    assert [e.seq for e in envs] == [0, 1, 2] and bytes(envs[0].args) == b"{}"
    assert bytes(envs[0].state) == b"null"
    assert msgspec.json.decode(envs[1].state, type=DurableState) == msgspec.convert(
        st, DurableState)
    assert msgspec.json.decode(envs[2].args, type=ARGS_TYPES["commit"]) == \
        ARGS_TYPES["commit"](index=2, op_term=1)
