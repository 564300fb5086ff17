"""The planners: CreateTable, DeleteTable, AlterTable, replacement, nudges; the Plan contract."""

from __future__ import annotations

import random

import pytest
from master_helpers import SCHEMA, create, describe, ok, run, servers, table, tablets

from revivify.impl.master.catalog import Catalog, TableState, TabletState, table_key, tablet_key
from revivify.impl.master.errors import (
    AlreadyPresent,
    IllegalState,
    InvalidArgument,
    MasterError,
    NameReserved,
    NotCommitted,
    NotEnoughServers,
    NotFound,
)
from revivify.impl.master.operations import (
    AlterTable,
    CreateTable,
    CreationWatch,
    Plan,
    TableCreated,
    creation_nudges,
    lock_order,
    plan_alter_table,
    plan_create_table,
    plan_delete_table,
    plan_replace_tablets,
)
from revivify.impl.tablet.columns import Column


def plan_create(catalog: Catalog, name: str = "t", request_id: str = "req-1",
                reserved: tuple[str, ...] = (), n_servers: int = 3,
                **kw: int) -> Plan[TableCreated] | MasterError:
    return plan_create_table(
        catalog, CreateTable(name, SCHEMA, kw.get("tablets", 3), kw.get("replicas", 3),
                             request_id),
        servers=servers(n_servers), reserved=reserved, rng=random.Random(kw.get("seed", 0)))


class TestCreateTable:
    def test_one_write_tablets_then_table_and_calls_only_after_commit(self) -> None:
        empty = Catalog()
        plan = ok(plan_create(empty))
        assert plan.op == "create_table"
        records = list(plan.write.records())
        assert [type(r).__name__ for r in records] == ["TabletRecord"] * 3 + ["TableRecord"]
        # Nothing is visible in the snapshot the plan was made on (seed exception 1).
        assert empty.table_by_name("t") is None and not empty.tablets
        # The calls and the reply do not come out before the write is held.
        with pytest.raises(NotCommitted):
            plan.commit(empty)
        after, reply, calls = run(empty, plan)
        assert table(after).state is TableState.RUNNING
        assert [t.state for t in tablets(after)] == [TabletState.CREATING] * 3
        assert reply.tablet_ids == tuple(t.tablet_id for t in tablets(after))
        assert len(calls) == 9 and {c.method for c in calls} == {"Admin.CreateTablet"}
        assert plan.reserve == frozenset({"t"})

    def test_locks_are_tables_then_tablets(self) -> None:
        plan = ok(plan_create(Catalog()))
        kinds = [k for k, _ in plan.locks]
        assert kinds == ["table"] + ["tablet"] * 3
        assert lock_order(["b", "a"], ["z", "y"]) == (
            ("table", "a"), ("table", "b"), ("tablet", "y"), ("tablet", "z"))

    def test_retry_of_the_same_request_answers_ok_without_a_write(self) -> None:
        catalog, first, _ = create(Catalog())
        retry = ok(plan_create(catalog))
        assert retry.write.is_empty()
        done = retry.commit(catalog)
        assert done.reply.already_existed and done.reply.table_id == first.table_id
        assert done.reply.tablet_ids == first.tablet_ids and done.calls == ()

    def test_another_request_for_the_name_is_already_present(self) -> None:
        catalog, first, _ = create(Catalog())
        assert plan_create(catalog, request_id="other") == AlreadyPresent(
            "table", "t", first.table_id)
        assert plan_create(catalog, request_id="") == AlreadyPresent("table", "t",
                                                                     first.table_id)

    def test_a_name_in_flight_is_reserved_and_retryable(self) -> None:
        refusal = plan_create(Catalog(), reserved=("t",))
        assert refusal == NameReserved("t") and refusal.retryable

    def test_not_enough_live_servers(self) -> None:
        refusal = plan_create(Catalog(), n_servers=2)
        assert refusal == NotEnoughServers(needed=3, live=2) and refusal.retryable

    @pytest.mark.parametrize(("kw", "fragment"), [
        ({"tablets": 0}, "tablets"), ({"tablets": 1001}, "tablets"),
        ({"replicas": 2}, "odd"), ({"replicas": 9}, "odd"),
    ])
    def test_bad_counts(self, kw: dict[str, int], fragment: str) -> None:
        refusal = plan_create(Catalog(), tablets=kw.get("tablets", 3),
                              replicas=kw.get("replicas", 3))
        assert isinstance(refusal, InvalidArgument) and fragment in refusal.detail

    @pytest.mark.parametrize("schema", [
        (), (Column("v"),), (Column("k", key=True), Column("k")),
        (Column("k", key=True), Column("v", key=True)),
        (Column("k", "uuid", key=True),),  # type: ignore[arg-type]
        (Column(" k", key=True),),
    ])
    def test_bad_schema(self, schema: tuple[Column, ...]) -> None:
        refusal = plan_create_table(Catalog(), CreateTable("t", schema, 1, 1), servers=servers(1),
                                    reserved=(), rng=random.Random(0))
        assert isinstance(refusal, InvalidArgument)

    @pytest.mark.parametrize("name", ["", "x" * 257, " t", "a\nb"])
    def test_bad_name(self, name: str) -> None:
        assert isinstance(plan_create(Catalog(), name=name), InvalidArgument)

    def test_a_deleted_tables_name_may_be_reused(self) -> None:
        catalog, first, _ = create(Catalog())
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        catalog, second, _ = create(catalog, request_id="req-2", seed=1)
        assert second.table_id != first.table_id
        assert catalog.tables[first.table_id].state is TableState.REMOVED  # kept forever


class TestDeleteTable:
    def test_one_write_then_delete_calls_to_every_replica(self) -> None:
        catalog, created, _ = create(Catalog())
        plan = ok(plan_delete_table(catalog, "t"))
        assert [type(r).__name__ for r in plan.write.records()] == \
            ["TabletRecord"] * 3 + ["TableRecord"]  # commit order: tablets first
        with pytest.raises(NotCommitted):  # seed exception 2: no RPC before commit
            plan.commit(catalog)
        after, reply, calls = run(catalog, plan)
        assert reply.table_id == created.table_id
        assert after.table_by_name("t") is None
        assert all(t.state is TabletState.DELETED for t in after.tablets.values())
        assert {(d, m, detail) for d, m, detail in describe(calls)} == {
            (s.uuid, "DeleteTablet", ("DELETED", None)) for s in servers(3)}
        assert len(calls) == 9

    def test_locks_the_table_then_all_its_tablets(self) -> None:
        catalog, created, _ = create(Catalog())
        plan = ok(plan_delete_table(catalog, "t"))
        assert plan.locks[0] == ("table", created.table_id)
        assert {k for k, _ in plan.locks[1:]} == {"tablet"}

    def test_missing_table(self) -> None:
        catalog, _, _ = create(Catalog())
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        assert plan_delete_table(catalog, "t") == NotFound("table", "t")


class TestAlterTable:
    def test_schema_change_bumps_version_and_alters_known_leaders(self) -> None:
        catalog, _, _ = create(Catalog())
        plan = ok(plan_alter_table(catalog, AlterTable("t", add_columns=(Column("c"),)),
                                   reserved=()))
        after, reply, calls = run(catalog, plan)
        assert reply.schema_version == 1
        assert table(after).state is TableState.ALTERING
        # Each column remembers the schema version that added it (the create's are 0).
        assert [c.name for c in table(after).schema][-1] == "c"
        assert table(after).column_versions == (0,) * (len(table(after).schema) - 1) + (1,)
        assert calls == ()  # no leader known yet: the reports will carry the alter

    def test_rename_keeps_state_and_reserves_the_new_name(self) -> None:
        catalog, _, _ = create(Catalog())
        plan = ok(plan_alter_table(catalog, AlterTable("t", new_name="u"), reserved=()))
        assert plan.reserve == frozenset({"u"})
        after, _, _ = run(catalog, plan)
        assert after.table_by_name("t") is None
        assert table(after, "u").state is TableState.RUNNING

    def test_refusals(self) -> None:
        catalog, _, _ = create(Catalog())
        catalog, _, _ = create(catalog, "other", request_id="req-2")
        assert plan_alter_table(catalog, AlterTable("nope", new_name="x"), reserved=()) == \
            NotFound("table", "nope")
        assert isinstance(plan_alter_table(catalog, AlterTable("t"), reserved=()),
                          InvalidArgument)
        assert isinstance(plan_alter_table(catalog, AlterTable("t", drop_columns=("key",)),
                                           reserved=()), InvalidArgument)
        assert isinstance(plan_alter_table(catalog, AlterTable("t", drop_columns=("zz",)),
                                           reserved=()), InvalidArgument)
        assert plan_alter_table(catalog, AlterTable(
            "t", add_columns=(Column("value"),)), reserved=()) == \
            InvalidArgument("column 'value' already exists")
        assert isinstance(plan_alter_table(catalog, AlterTable("t", new_name="other"),
                                           reserved=()), AlreadyPresent)
        assert plan_alter_table(catalog, AlterTable("t", new_name="x"), reserved=("x",)) == \
            NameReserved("x")
        assert isinstance(plan_alter_table(catalog, AlterTable("t", new_name="t"),
                                           reserved=()), InvalidArgument)


class TestReplacement:
    def test_old_replaced_and_new_creating_in_one_write(self) -> None:
        catalog, created, _ = create(Catalog(), live=servers(6))
        old_id = created.tablet_ids[1]
        plan = ok(plan_replace_tablets(catalog, [old_id], servers=servers(6),
                                       rng=random.Random(5)))
        with pytest.raises(NotCommitted):  # seed exception 3
            plan.commit(catalog)
        after, reply, calls = run(catalog, plan)
        ((old, new),) = reply.replaced
        assert old == old_id
        assert after.tablets[old].state is TabletState.REPLACED
        assert after.tablets[old].replaced_by == new
        assert after.tablets[new].state is TabletState.CREATING
        assert after.tablets[new].partition == after.tablets[old].partition
        methods = sorted(c.method for c in calls)
        assert methods == ["Admin.CreateTablet"] * 3 + ["Admin.DeleteTablet"] * 3
        assert {c.tablet_id for c in calls if c.method == "Admin.DeleteTablet"} == {old}

    def test_only_creating_tablets_of_live_tables(self) -> None:
        catalog, created, _ = create(Catalog())
        assert plan_replace_tablets(catalog, ["nope"], servers=servers(3),
                                    rng=random.Random(0)) == NotFound("tablet", "nope")
        assert isinstance(plan_replace_tablets(catalog, [], servers=servers(3),
                                               rng=random.Random(0)), InvalidArgument)
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        assert isinstance(plan_replace_tablets(catalog, [created.tablet_ids[0]],
                                               servers=servers(3), rng=random.Random(0)),
                          IllegalState)

    def test_creation_watch_and_nudges(self) -> None:
        catalog, created, _ = create(Catalog())
        watch = CreationWatch().observe(catalog, now=10.0)
        assert watch.timed_out(now=15.0, timeout=30.0) == ()
        watch = watch.observe(catalog, now=40.0)  # first-seen times are kept
        assert watch.timed_out(now=40.0, timeout=30.0) == tuple(sorted(created.tablet_ids))
        assert len(creation_nudges(catalog)) == 9
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t")))
        assert creation_nudges(catalog) == ()
        assert CreationWatch().observe(catalog, 0.0).since == {}


class TestPlanContract:
    def test_a_failed_replication_changes_nothing_kudu_495(self) -> None:
        """KUDU-495: the write did not replicate (lost leadership): the snapshot is the one
        before, nothing is sent, and the operation can simply be planned again."""
        catalog, _, _ = create(Catalog())
        plan = ok(plan_delete_table(catalog, "t"))
        # ... proposal fails: the shell never applies plan.write ...
        with pytest.raises(NotCommitted):
            plan.commit(catalog)
        assert table(catalog).state is TableState.RUNNING
        again = ok(plan_delete_table(catalog, "t"))
        assert again.write == plan.write

    def test_a_stale_plan_is_detected_before_it_is_proposed(self) -> None:
        catalog, _, _ = create(Catalog())
        alter = ok(plan_alter_table(catalog, AlterTable("t", add_columns=(Column("c"),)),
                                    reserved=()))
        delete = ok(plan_delete_table(catalog, "t"))
        catalog, _, _ = run(catalog, delete)
        assert not alter.is_fresh(catalog)
        assert alter.write.stale_rows(catalog) == (table_key(delete.write.tables[0].table_id),)

    def test_commit_needs_exactly_the_plans_rows(self) -> None:
        """A plan resolves at the apply of its own entry; a snapshot where a later write
        changed its rows, or where an equal-versioned other write landed, is refused."""
        catalog, _, _ = create(Catalog())
        alter = ok(plan_alter_table(catalog, AlterTable("t", add_columns=(Column("c"),)),
                                    reserved=()))
        other = ok(plan_alter_table(catalog, AlterTable("t", add_columns=(Column("d"),)),
                                    reserved=()))
        after, _, _ = run(catalog, other)  # same row, same version, another decision
        with pytest.raises(NotCommitted):
            alter.commit(after)
        after, _, _ = run(catalog, alter)
        assert alter.commit(after).reply.schema_version == 1
        after, _, _ = run(after, ok(plan_delete_table(after, "t")))
        with pytest.raises(NotCommitted):
            alter.commit(after)

    def test_a_plan_locks_and_reads_every_row_it_writes(self) -> None:
        catalog, created, _ = create(Catalog())
        plan = ok(plan_delete_table(catalog, "t"))
        for tablet_id in created.tablet_ids:
            assert ("tablet", tablet_id) in plan.locks
            assert tablet_key(tablet_id) in plan.reads
        assert isinstance(plan, Plan)
