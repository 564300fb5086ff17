"""The seams between the rooms of the master shell (impl/master/server.py): what one room
keeps for another, tested on a MasterServer that is not started."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import trio
import trio.testing
from master_helpers import create

from revivify.impl.master.calls import TabletServerCall, change_config
from revivify.impl.master.catalog import Catalog
from revivify.impl.master.healing import SentChanges
from revivify.impl.master.server import MasterOptions, MasterServer


def _change(dest: str = "ts-1", cas: int = 4) -> TabletServerCall:
    return change_config(dest, "tablet-1", cast(Any, None), cas, "test")


class TestSentChanges:
    """The healing policy's ChangeConfig backoff, and delivery forgetting a moot one."""

    def test_the_same_change_waits_out_the_backoff(self) -> None:
        sent = SentChanges(backoff=5.0)
        assert sent.admit(_change(), 10.0)
        assert not sent.admit(_change(), 14.9)
        assert sent.admit(_change(), 15.0)

    def test_another_cas_or_leader_goes_at_once(self) -> None:
        sent = SentChanges(backoff=5.0)
        assert sent.admit(_change(), 10.0)
        assert sent.admit(_change(cas=5), 10.1)
        assert sent.admit(_change(dest="ts-2"), 10.2)

    def test_a_forgotten_change_goes_at_once(self) -> None:
        sent = SentChanges(backoff=5.0)
        assert sent.admit(_change(), 10.0)
        sent.forget("tablet-1")
        assert sent.admit(_change(), 10.1)

    def test_delivery_forgets_through_the_healers_marks(self) -> None:
        master = MasterServer(MasterOptions(fs_root="/nonexistent"))
        changes = master.healer._changes
        assert changes.admit(_change(), 1.0)
        master.delivery._forget_change("tablet-1")
        assert changes.admit(_change(), 1.1)


class TestCreationWatch:
    """The background's CreationWatch starts afresh each time the gate opens: a tablet gets
    a full ``creation_timeout`` under every ready leader (and after every rebuild)."""

    def test_the_watch_restarts_when_the_gate_opens_again(self) -> None:
        catalog, _, _ = create(Catalog(), tablets=1)
        master = MasterServer(MasterOptions(fs_root="/nonexistent", creation_timeout=60.0))
        master.embedded.ts = cast(Any, SimpleNamespace())
        master.gate.catalog = catalog
        master.gate.opened = 1
        background = master.background

        async def scenario() -> None:
            await background._replace_timed_out()
            first = dict(background._watch.since)
            assert len(first) == 1
            await trio.sleep(30.0)
            await background._replace_timed_out()
            assert background._watch.since == first, "the same leader: the same watch"
            master.gate.opened = 2  # a new ready term, or a rebuild
            await background._replace_timed_out()
            assert all(t == trio.current_time() for t in background._watch.since.values())

        trio.run(scenario, clock=trio.testing.MockClock(autojump_threshold=0))
