"""The table client routes rows to RUNNING tablets only (impl/client/table.py; the master
simulation's CREATING_TABLET_REPLACED): a tablet still CREATING in the catalog may be
replaced by the leader master, taking every row it acknowledged with it."""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest
import trio
import trio.testing

from revivify.impl.client import ClientOptions, DeadlineExceeded, TabletNotRunningError
from revivify.impl.client.table import TableClient, routes_from
from revivify.impl.master import api
from revivify.impl.master.catalog import hash_bucket


def _tablet(partition: int, state: str, replicas: int = 3) -> api.TabletLocationInfo:
    return api.TabletLocationInfo(
        f"tablet-{partition}", partition, state, 1,
        [api.ReplicaLocationInfo(f"ts-{i}", f"ts-{i}:7050", "VOTER", i == 0, True)
         for i in range(replicas)])


def _reply(*tablets: api.TabletLocationInfo) -> api.TableLocationsReply:
    return api.TableLocationsReply("table-1", "t", 0, len(tablets), list(tablets), 3)


class FakeMaster:
    """A MasterClient that answers GetTableLocations with ``reply``, and keeps requests."""

    def __init__(self, reply: api.TableLocationsReply) -> None:
        self.reply = reply
        self.requests: list[msgspec.Struct] = []

    async def call(self, method: str, body: msgspec.Struct, response: type[Any], *,
                   deadline: float | None = None) -> Any:
        assert method == api.MASTER_TABLE_LOCATIONS
        self.requests.append(body)
        return self.reply


def _client(master: FakeMaster, deadline: float = 5.0) -> TableClient:
    return TableClient(cast(Any, None), ["m:7051"], "t", client_id="c",
                       options=ClientOptions(deadline=deadline), master=cast(Any, master))


class TestRoutes:
    """routes_from: only RUNNING tablets with replicas are routes."""

    def test_a_creating_tablet_is_not_a_route_even_if_a_master_lists_its_replicas(
            self) -> None:
        routes = routes_from(_reply(_tablet(0, "RUNNING"), _tablet(1, "CREATING")))
        assert set(routes.by_partition) == {0}
        assert routes.not_running == {1: ("tablet-1", "CREATING")}

    def test_a_tablet_without_replicas_is_not_a_route(self) -> None:
        routes = routes_from(_reply(_tablet(0, "CREATING", replicas=0)))
        assert not routes.by_partition and 0 in routes.not_running


class TestNotRunningYet:
    """A write to a bucket whose tablet is not RUNNING is retried until the deadline."""

    def test_the_client_asks_for_running_tablets_only(self) -> None:
        master = FakeMaster(_reply(_tablet(0, "RUNNING")))

        async def main() -> None:
            await _client(master).refresh()

        trio.run(main)
        (request,) = master.requests
        assert isinstance(request, api.TableLocationsRequest) and request.running_only

    def test_a_write_gives_up_at_its_deadline_saying_why(self) -> None:
        master = FakeMaster(_reply(_tablet(0, "CREATING", replicas=0)))

        async def main() -> None:
            client = _client(master, deadline=5.0)
            started = trio.current_time()
            with pytest.raises(DeadlineExceeded) as caught:
                await client.put(b"k", b"v")
            assert 4.0 <= trio.current_time() - started <= 5.0
            assert isinstance(caught.value.last_error, TabletNotRunningError)
            assert not caught.value.outcome_unknown  # nothing was sent to a tablet
            assert "CREATING" in caught.value.message
            assert "not RUNNING yet" in caught.value.message
            assert len(master.requests) > 2, "the locations were fetched again"

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))

    def test_tablet_of_a_creating_bucket_says_so(self) -> None:
        master = FakeMaster(_reply(_tablet(0, "CREATING", replicas=0)))
        assert hash_bucket(b"k", 1) == 0

        async def main() -> None:
            with pytest.raises(TabletNotRunningError, match="CREATING"):
                await _client(master).tablet_of(b"k")

        trio.run(main)
