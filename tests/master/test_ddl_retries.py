"""DeleteTable and AlterTable retried after a lost reply (issue 18's leftover;
impl/master/operations.py "Retries"): the request id recorded by the write that carried out
the request makes its retry answer OK with what it did, not NOT_FOUND or "column exists".

The planners on their own, then masters and tablet servers in one process (MemoryNetwork,
MockClock) with the leader's reply to the client dropped: the client library retries by
itself and, with a request id, gets OK; without one (an older client), the refusal the
issue describes (the control that shows the scenario loses the reply)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio
from master_helpers import (
    SCHEMA,
    create,
    ok,
    run,
    servers,
    table,
)
from test_master_sim import create as create_table
from test_master_sim import run as run_cluster

from revivify.impl.client.errors import Rejected
from revivify.impl.client.master import open_master_client
from revivify.impl.master import api
from revivify.impl.master.catalog import Catalog
from revivify.impl.master.errors import InvalidArgument, NotFound
from revivify.impl.master.operations import (
    AlterTable,
    CreateTable,
    plan_alter_table,
    plan_create_table,
    plan_delete_table,
)
from revivify.impl.tablet.columns import Column
from revivify.impl.testing.mastercluster import SimMasterCluster
from revivify.impl.testing.memnet import LinkFaults


class TestDeleteRetry:
    def test_a_retry_of_the_delete_answers_ok_with_the_table(self) -> None:
        catalog, made, _ = create(Catalog())
        catalog, first, calls = run(catalog, ok(plan_delete_table(catalog, "t", "d-1")))
        assert calls  # the first try sent the DeleteTablet calls
        plan = ok(plan_delete_table(catalog, "t", "d-1"))
        assert plan.write.is_empty()
        _, again, calls = run(catalog, plan)
        assert again == first and again.table_id == made.table_id and calls == ()

    def test_another_request_or_none_is_not_found(self) -> None:
        catalog, _, _ = create(Catalog())
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t", "d-1")))
        assert plan_delete_table(catalog, "t", "d-2") == NotFound("table", "t")
        assert plan_delete_table(catalog, "t") == NotFound("table", "t")

    def test_a_retry_never_deletes_a_new_table_of_the_name(self) -> None:
        catalog, first, _ = create(Catalog())
        catalog, _, _ = run(catalog, ok(plan_delete_table(catalog, "t", "d-1")))
        catalog, second, _ = create(catalog, request_id="req-2", seed=1)
        plan = ok(plan_delete_table(catalog, "t", "d-1"))
        assert plan.write.is_empty()
        _, again, _ = run(catalog, plan)
        assert again.table_id == first.table_id
        assert table(catalog).table_id == second.table_id  # still there


class TestAlterRetry:
    def test_a_retry_of_an_add_answers_ok(self) -> None:
        catalog, _, _ = create(Catalog())
        add = AlterTable("t", add_columns=(Column("c"),), request_id="a-1")
        catalog, first, _ = run(catalog, ok(plan_alter_table(catalog, add, reserved=())))
        plan = ok(plan_alter_table(catalog, add, reserved=()))
        assert plan.write.is_empty()
        _, again, calls = run(catalog, plan)
        assert again == first and calls == ()
        # Without the id, the same add is refused: the column exists.
        bare = AlterTable("t", add_columns=(Column("c"),))
        assert isinstance(plan_alter_table(catalog, bare, reserved=()), InvalidArgument)

    def test_a_retry_of_a_rename_finds_the_table_under_its_new_name(self) -> None:
        catalog, made, _ = create(Catalog())
        rename = AlterTable("t", new_name="u", request_id="a-1")
        catalog, first, _ = run(catalog, ok(plan_alter_table(catalog, rename, reserved=())))
        _, again, _ = run(catalog, ok(plan_alter_table(catalog, rename, reserved=())))
        assert again == first and again.table_id == made.table_id

    def test_a_later_alter_replaces_the_id(self) -> None:
        catalog, _, _ = create(Catalog())
        add = AlterTable("t", add_columns=(Column("c"),), request_id="a-1")
        catalog, _, _ = run(catalog, ok(plan_alter_table(catalog, add, reserved=())))
        later = AlterTable("t", add_columns=(Column("d"),), request_id="a-2")
        catalog, _, _ = run(catalog, ok(plan_alter_table(catalog, later, reserved=())))
        assert isinstance(plan_alter_table(catalog, add, reserved=()), InvalidArgument)


def test_create_retry_still_answers_ok() -> None:
    """CreateTable's id (the model the others follow) is unchanged."""
    catalog, made, _ = create(Catalog())
    again = ok(plan_create_table(catalog, CreateTable("t", SCHEMA, 3, 3, "req-1"),
                                 servers=servers(3), reserved=(), rng=random.Random(0)))
    assert again.write.is_empty()
    _, reply, _ = run(catalog, again)
    assert reply.table_id == made.table_id and reply.already_existed


# ---------------------------------------------------------------------------- in process


async def _call_with_lost_reply(c: SimMasterCluster, leader: int, method: str,
                                body: api.DeleteTableRequest | api.AlterTableRequest,
                                response: type[api.TableDeletedReply]
                                | type[api.TableAlteredReply]) -> object:
    """``method`` through a MasterClient, the leader's first reply to it dropped (the
    connection reset after the leader answered): the client retries by itself."""
    host = c.masters[leader].host
    async with open_master_client([c.masters[leader].address],
                                  network=c.net.host("client")) as client:
        await client.call(api.MASTER_LIST_TABLES, api.ListTablesRequest(), api.TableList)
        drops = len(c.net.events_of("drop"))
        c.net.set_link_faults(host, "client", LinkFaults(drop_probability=1.0))
        result: list[object] = []

        async def heal_after_the_drop() -> None:
            while len(c.net.events_of("drop")) == drops:
                await trio.sleep(0.001)
            c.net.clear_link_faults()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(heal_after_the_drop)
            try:
                result.append(await client.call(method, body, response))
            except Rejected as exc:
                result.append(exc)
        assert len(c.net.events_of("drop")) == drops + 1
        return result[0]


@pytest.mark.parametrize("with_id", [True, False])
def test_delete_and_alter_retried_after_a_lost_reply(tmp_path: Path, with_id: bool) -> None:
    async def scenario(c: SimMasterCluster) -> None:
        leader = await c.ready_leader()
        made = await create_table(c, leader, "gone", 1, 3)
        await create_table(c, leader, "kept", 1, 3)
        rid = "r-delete" if with_id else ""
        got = await _call_with_lost_reply(c, leader, api.MASTER_DELETE_TABLE,
                                          api.DeleteTableRequest("gone", rid),
                                          api.TableDeletedReply)
        if with_id:
            assert got == api.TableDeletedReply(made.table_id)
        else:
            assert isinstance(got, Rejected) and "NOT_FOUND" in str(got)
        rid = "r-alter" if with_id else ""
        got = await _call_with_lost_reply(
            c, leader, api.MASTER_ALTER_TABLE,
            api.AlterTableRequest("kept", [Column("extra", "string")], request_id=rid),
            api.TableAlteredReply)
        if with_id:
            assert isinstance(got, api.TableAlteredReply) and got.schema_version == 1
        else:
            assert isinstance(got, Rejected) and "INVALID_ARGUMENT" in str(got)
        # Either way the changes went through exactly once.
        tables = await c.call_master(leader, api.MASTER_LIST_TABLES, api.ListTablesRequest(),
                                     api.TableList)
        assert [(t.name, t.schema_version) for t in tables.tables] == [("kept", 1)]

    run_cluster(tmp_path, scenario, masters=1, tservers=3)
