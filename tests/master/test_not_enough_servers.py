"""NOT_ENOUGH_SERVERS: retryable only while the master may not have heard every live
tablet server yet (issue 31; impl/master/errors.py NotEnoughServers, service.py).

One master and two tablet servers in one process (MemoryNetwork, MockClock): a CreateTable
asking for three replicas is refused with ``retryable`` set while the master has run less
than its dead-after timeout (a server it has not heard from may be live), and with it
cleared once it has run longer (every live server heartbeats every master within that
window: the count is certain, and asking again only delays the same answer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing
from test_master_sim import live_servers, until

from revivify.impl.master import api
from revivify.impl.testing.mastercluster import SimMasterCluster, open_master_cluster

DEAD_AFTER = 5.0


def test_the_refusal_is_final_once_the_master_has_heard_every_live_server(
        tmp_path: Path) -> None:
    said: list[tuple[float, int]] = []  # (seconds since the master started, retryable)

    async def ask(c: SimMasterCluster) -> None:
        master = c.masters[0].master
        assert master is not None and master.embedded.started_at is not None
        request = api.CreateTableRequest("t", [], 1, 3, request_id="r")
        with pytest.raises(api.Refused) as refused:
            await c.call_master(0, api.MASTER_CREATE_TABLE, request, api.TableCreatedReply)
        assert refused.value.reason == "NOT_ENOUGH_SERVERS"
        assert "3 needed for the replicas, 2 live" in refused.value.detail
        said.append((trio.current_time() - master.embedded.started_at,
                     refused.value.retryable))

    async def scenario(c: SimMasterCluster) -> None:
        await c.ready_leader()
        await until(lambda: _two_live(c), "2 live servers")
        await ask(c)
        await trio.sleep(DEAD_AFTER)
        await ask(c)

    async def _two_live(c: SimMasterCluster) -> bool:
        return await live_servers(c, 0) == 2

    run_one(tmp_path, scenario)
    early, late = said
    assert early[0] < DEAD_AFTER and early[1] == 1, said  # a server may yet be heard from
    assert late[0] >= DEAD_AFTER and late[1] == 0, said  # certain: not asked again


def run_one(tmp_path: Path, scenario: Callable[[SimMasterCluster], Awaitable[None]]
            ) -> None:
    """One master, two servers, a dead-after of DEAD_AFTER, in simulated time."""
    async def main() -> None:
        async with open_master_cluster(str(tmp_path), 1, 2, seed=3, master_options={
                "dead_after": DEAD_AFTER, "failed_after": DEAD_AFTER}) as c:
            await c.start_all()
            await scenario(c)
            await c.stop_all()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
