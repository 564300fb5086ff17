"""Builders shared by the master core's tests (imported as a top-level module)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, TypeVar

from revivify.impl.consensus.messages import Config, Peer
from revivify.impl.master.calls import TabletServerCall
from revivify.impl.master.catalog import Catalog, TableRecord, TabletRecord
from revivify.impl.master.errors import MasterError
from revivify.impl.master.operations import (
    CreateTable,
    Plan,
    TableCreated,
    plan_create_table,
)
from revivify.impl.master.placement import Candidate
from revivify.impl.master.reports import ReportProcessed, process_report
from revivify.impl.tablet.columns import Column
from revivify.impl.tserver.master_api import (
    ReplicaState,
    ReportedConsensus,
    ReportedReplica,
    TabletReport,
)

R = TypeVar("R")

SCHEMA = (Column("key", "binary", key=True), Column("value", "string"))


def servers(n: int) -> list[Candidate]:
    return [Candidate(f"ts-{i}", f"127.0.0.1:{7050 + i}") for i in range(1, n + 1)]


def ok(result: Plan[R] | MasterError) -> Plan[R]:
    assert isinstance(result, Plan), f"refused: {result}"
    return result


def run(catalog: Catalog, plan: Plan[R]) -> tuple[Catalog, R, tuple[TabletServerCall, ...]]:
    """Replicate the plan's write (apply it), then commit: the shell's steps 3-5."""
    assert plan.is_fresh(catalog)
    after = catalog.apply(plan.write)
    done = plan.commit(after)
    after.check()
    return after, done.reply, done.calls


def create(catalog: Catalog, name: str = "t", *, tablets: int = 3, replicas: int = 3,
           live: Sequence[Candidate] | None = None, seed: int = 0, request_id: str = "req-1",
           ) -> tuple[Catalog, TableCreated, tuple[TabletServerCall, ...]]:
    plan = ok(plan_create_table(
        catalog, CreateTable(name, SCHEMA, tablets, replicas, request_id),
        servers=servers(3) if live is None else live, reserved=(), rng=random.Random(seed)))
    return run(catalog, plan)


def table(catalog: Catalog, name: str = "t") -> TableRecord:
    record = catalog.table_by_name(name)
    assert record is not None
    return record


def tablets(catalog: Catalog, name: str = "t") -> tuple[TabletRecord, ...]:
    return catalog.live_tablets_of(table(catalog, name).table_id)


def replica(tablet: TabletRecord, state: ReplicaState = "RUNNING", *, term: int | None = None,
            leader: str | None = "", config: Config | None = None,
            schema_version: int | None = 0, consensus: bool = True) -> ReportedReplica:
    """A replica of ``tablet`` reporting the recorded config by default; ``leader=""``
    means "the first peer", ``term`` defaults to the recorded term + 1."""
    cfg = tablet.consensus.config if config is None else config
    if leader == "":
        leader = cfg.peers[0].uuid
    reported = ReportedConsensus(
        term=tablet.consensus.term + 1 if term is None else term, leader=leader, config=cfg)
    return ReportedReplica(tablet.tablet_id, state, reported if consensus else None,
                           schema_version)


def report(*replicas: ReportedReplica, full: bool = True, seq: int = 0) -> TabletReport:
    return TabletReport(full=full, seq=seq, replicas=list(replicas))


def process(catalog: Catalog, server: str, *replicas: ReportedReplica,
            ) -> tuple[Catalog, ReportProcessed, tuple[TabletServerCall, ...]]:
    return run(catalog, ok(process_report(catalog, server, report(*replicas))))


def config(index: int, *uuids: str) -> Config:
    return Config(opid_index=index, peers=tuple(Peer(u, f"addr-{u}") for u in uuids))


def describe(calls: Sequence[TabletServerCall]) -> list[tuple[str, str, Any]]:
    """(dest, method, (mode, cas) or schema version) of each call, sorted: for asserts."""
    out: list[tuple[str, str, Any]] = []
    for call in calls:
        body: Any = call.body
        detail: Any = None
        if hasattr(body, "mode"):
            detail = (body.mode, body.cas_config_index)
        elif hasattr(body, "schema_version"):
            detail = body.schema_version
        out.append((call.dest, call.method.split(".")[-1], detail))
    return sorted(out, key=repr)
