"""What the writer emits validates against traces/schema.json, event kind by event kind.

The writer (impl/) and the reader (checker/) never import each other; both use the
contract's typed records (``revivify.contract``): the writer builds every line through them,
the reader decodes into them, and schema.json is generated from them
(``test_reader.test_schema_json_is_generated``). This test holds the writer's actual lines
to the schema, independently of msgspec. It validates (with ``jsonschema_lite``) every
line of: an in-process cluster run (the real tablet servers: Raft, deletion, copy,
step-down, a config change, a full delete), the facts of a real Raft core driven by
impl/testing/raft.py written through the writer, and lines the writer's own state builders
make for what those runs do not reach (a failed copy, a FAILED startup). Every contract
event the implementation names must be among the kinds validated."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from revivify.checker.traces import KNOWN_EVENTS
from revivify.impl.consensus.core import Options
from revivify.impl.master.calls import delete_tablet
from revivify.impl.master.catalog import Catalog
from revivify.impl.master.errors import MasterError
from revivify.impl.master.operations import CreateTable, plan_create_table
from revivify.impl.master.placement import Candidate
from revivify.impl.master.tracing import call_fact, commit_fact, ready_fact
from revivify.impl.tablet.columns import Column
from revivify.impl.testing.raft import RaftCluster
from revivify.impl.trace import TraceWriter, durable_state, startup_args
from revivify.impl.tserver.durable import Blocks, Durable, Sb, Wal
from revivify.impl.tserver.manager.shell import COPY_STEPS, DELETE_STEPS, FULL_DELETE_STEPS
from revivify.impl.tserver.replica import fact_state

from .conftest import ROOT, TRACES
from .jsonschema_lite import Validator

# Calls that write an event, and the name they write.
_CALL = re.compile(r'(?:\.event|_fact|_step|on_step|\.trace)\(\s*(?:[\w.]+,\s*)?"([a-z_]+)"')


def writer_event_names() -> set[str]:
    """The contract events the implementation (outside its test doubles) writes: names at
    its trace call sites, its deletion and copy step lists, and any string it holds that
    names a contract event (``"vote_granted" if granted else "vote_denied"``)."""
    names = set(DELETE_STEPS) | set(FULL_DELETE_STEPS) | set(COPY_STEPS)
    for f in (ROOT / "impl").rglob("*.py"):
        if "testing" in f.parts or f.name == "trace.py":
            continue
        text = f.read_text()
        names.update(_CALL.findall(text))
        names.update(n for n in re.findall(r'"([a-z_]+)"', text) if n in KNOWN_EVENTS)
    return names


def _validator() -> Validator:
    return Validator(json.loads((TRACES / "schema.json").read_text()))


def _check(v: Validator, lines: list[dict[str, Any]], where: str) -> set[str]:
    for n, line in enumerate(lines, 1):
        errors = v.errors(line)
        assert not errors, f"{where}:{n} {line['event']}: {errors}"
    return {line["event"] for line in lines}


def _read(d: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for f in sorted(d.rglob("*.jsonl")) for x in f.read_text().splitlines()]


def _raft_facts(tmp: Path) -> Path:
    """A real Raft core's facts (impl/testing/raft.py), written by the writer the way the
    server writes them (the fact, the state ``fact_state`` builds from it)."""
    # Without pre-vote: a stale candidate's real vote requests are denied (vote_denied).
    c = RaftCluster(seed=5, options=Options(pre_vote=False, check_quorum=False))
    c.add_nodes(3)
    c.campaign("1")
    c.stabilize()
    for k in range(3):
        c.propose("1", b"x%d" % k)
    c.stabilize()
    c.partition(["3"], ["1", "2"])
    for k in range(3):
        c.propose("1", b"y%d" % k)
    c.stabilize()
    c.heal()
    leader = c.leader()
    assert leader is not None
    cas = c.core(leader).committed_config.opid_index
    c.change_config(leader, "REMOVE", "3", cas=cas)
    c.stabilize()
    c.step_down(leader)
    c.stabilize()
    c.crash("1")
    c.tick("2", 10)  # no leader heard from for an election timeout
    c.campaign("3")  # a stale log: node 2 denies it (and adopts its term)
    c.stabilize()
    d = tmp / "raft"
    for uuid in c.uuids():
        with TraceWriter(str(d), uuid, 1) as w:
            for fact in c.node(uuid).facts:
                w.event(fact.event, fact.args, fact_state(fact), tablet="t1")
    return d


def _state_builders(tmp: Path) -> Path:
    """Lines the writer's own state builders make for steps the runs do not reach."""
    d = tmp / "builders"
    cmeta = {"term": 2, "voted_for": None, "config_index": 0}
    with TraceWriter(str(d), "a" * 32, 1) as w:
        w.event("server_format")
        w.event("server_start")
        w.event("startup", startup_args("FAILED", "WAL segment 3: bad checksum"),
                durable_state(data_state="READY", cmeta=cmeta, wal="DAMAGED",
                              wal_last_opid=(2, 9), blocks="PRESENT"), tablet="t1")
        w.event("copy_abort", {"reason": "source gone"},
                Durable(Sb.COPYING, tombstone_last=(1, 4), wal=Wal.ABSENT,
                        blocks=Blocks.PARTIAL, quarantine=(True, True)).record(), tablet="t2")
        # A master's events (contract version 4), from its own fact builders.
        w.event("master_ready", ready_fact(3, 7, _catalog()))
        w.event("catalog_commit", commit_fact(3, 8, "create_table", _catalog().records()))
        w.event("master_call", call_fact(3, delete_tablet("b" * 32, "c" * 32, "TOMBSTONE", 2,
                                                          "evicted")))
        w.event("server_stop")
    return d


def _catalog() -> Catalog:
    """A catalog of one table of one tablet (through the master's own planner)."""
    servers = [Candidate(c * 32, f"127.0.0.1:{7000 + i}") for i, c in enumerate("def")]
    plan = plan_create_table(Catalog(), CreateTable("t", (Column("key", key=True),), 1, 3,
                                                    "r1"),
                             servers=servers, reserved=frozenset(), rng=random.Random(1))
    assert not isinstance(plan, MasterError)
    return Catalog().apply(plan.write)


def test_writer_output_validates_against_the_schema(sim_traces: Path,
                                                    tmp_path: Path) -> None:
    v = _validator()
    seen = _check(v, _read(sim_traces), "cluster run")
    seen |= _check(v, _read(_raft_facts(tmp_path)), "raft core")
    seen |= _check(v, _read(_state_builders(tmp_path)), "state builders")
    emitted = writer_event_names()
    assert emitted >= {"log_append", "commit", "become_leader", "create_tablet", "startup"}
    assert emitted - seen == set(), f"never validated: {sorted(emitted - seen)}"
    assert emitted <= KNOWN_EVENTS, f"unknown to the reader: {sorted(emitted - KNOWN_EVENTS)}"


def test_the_validator_refuses_what_the_schema_refuses() -> None:
    """The small validator is not vacuous: lines breaking each kind of rule fail."""
    v = _validator()
    good = {"v": 3, "node": "n", "inc": 1, "seq": 0, "lamport": 1, "wall_ns": 0,
            "tablet": "t", "event": "log_append",
            "args": {"first_index": 2, "op_term": 1, "op_index": 2, "prev_term": 1,
                     "terms": [[1, 1]]},
            "state": durable_state(data_state="READY", wal="LIVE", wal_last_opid=(1, 2),
                                   blocks="PRESENT",
                                   cmeta={"term": 1, "voted_for": None, "config_index": 0})}
    assert v.errors(good) == []
    v2 = json.loads(json.dumps(good))
    v2["v"] = 2
    del v2["args"]["prev_term"], v2["args"]["terms"]
    assert v.errors(v2) == []
    changes: list[Callable[[dict[str, Any]], object]] = [
        lambda x: x.update(v=5), lambda x: x.update(event="nope"),
        lambda x: x["args"].pop("terms"), lambda x: x["args"].update(terms=[[0, 1]]),
        lambda x: x["args"].update(extra=1), lambda x: x.update(tablet=None),
        lambda x: x["state"]["wal"].update(location="ELSEWHERE"), lambda x: x.pop("seq")]
    for change in changes:
        bad = json.loads(json.dumps(good))
        change(bad)
        assert v.errors(bad), bad
