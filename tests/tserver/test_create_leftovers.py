"""A CreateTablet never writes over what orphans.py keeps for an operator: a WAL directory
that holds entries (and its cmeta, which may hold a vote) with no superblock. Before, the
create overwrote that cmeta with a term-0 one (a vote forgotten) and opened the WAL."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.metadata import MetadataStore
from revivify.impl.testing.cluster import open_cluster
from revivify.impl.tserver import api


def test_a_create_refuses_a_kept_wal_with_entries(tmp_path: Path) -> None:
    seen: dict[str, object] = {}

    async def main() -> None:
        async with open_cluster(str(tmp_path / "traces"), 1, seed=3) as cluster:
            await cluster.start_all()
            await cluster.create_tablet("t1", [0])
            await cluster.wait_for_leader("t1")
            await cluster.stop(0)
            disk = cluster.servers[0].disk
            layout = ServerLayout("/srv/ts-0", disk)
            # The superblock lost (an operator's mistake, a broken disk): cmeta and a WAL
            # with entries remain, which startup keeps (logged) for an operator.
            disk.unlink(layout.superblock_path("t1"))
            disk.fsync_dir(layout.tablet_meta_dir)
            before = MetadataStore(layout).load_cmeta("t1")
            assert before is not None and before.current_term >= 1
            await cluster.start(0)
            with pytest.raises(api.TabletCreateFailed) as failed:
                await cluster.call(0, api.ADMIN_CREATE_TABLET,
                                   api.CreateTablet("t1", cluster.peers([0])),
                                   api.TabletCreated)
            seen["error"] = str(failed.value)
            seen["kept"] = MetadataStore(ServerLayout(
                "/srv/ts-0", cluster.servers[0].disk)).load_cmeta("t1") == before
            await cluster.stop(0)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert "kept for an operator" in str(seen["error"]), seen
    assert seen["kept"], "the create wrote over the kept cmeta"
