"""The kernel partition helper (kernel_partition.py) does what the partition tests rely on:
its rules drop the packets of the ports named (a connect hangs, it is not refused), they
are gone after the block however it ends, and a dead test's leftovers are swept."""

from __future__ import annotations

import socket
import subprocess

import pytest
import trio
from kernel_partition import Partition, cut, sweep_stale, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def _connects(port: int, seconds: float) -> bool:
    """Whether a TCP connect to 127.0.0.1:port completes within ``seconds``."""
    async def main() -> bool:
        with trio.move_on_after(seconds):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.aclose()
            return True
        return False

    return trio.run(main)


def test_a_cut_drops_packets_and_the_heal_restores_them() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        assert _connects(port, 2.0)
        with cut([port]) as partition:
            assert partition.listed()
            assert not _connects(port, 1.5)  # hangs: the SYN is dropped, nothing refuses
            partition.heal()
            assert not partition.listed()
            assert _connects(port, 2.0)
        assert _connects(port, 2.0)


def test_the_rules_are_removed_when_the_block_fails() -> None:
    kept: list[Partition] = []
    with pytest.raises(RuntimeError, match="boom"), cut([65001]) as partition:
        kept.append(partition)
        raise RuntimeError("boom")
    assert not kept[0].listed()


def test_a_dead_processes_table_is_swept_and_a_live_ones_is_not() -> None:
    dead = "revivify_cut_9999999_1"  # above Linux's PID_MAX_LIMIT (4194304): never alive
    subprocess.run(["nft", "add", "table", "inet", dead], check=True)
    try:
        with cut([65002]) as ours:
            assert dead not in subprocess.run(["nft", "list", "tables"], capture_output=True,
                                              text=True, check=True).stdout
            assert sweep_stale() == [] and ours.listed()
    finally:
        subprocess.run(["nft", "delete", "table", "inet", dead], capture_output=True,
                       check=False)
