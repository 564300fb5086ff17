"""Real tablet-server processes: each writes its log to FS_ROOT/logs/tserver.log at INFO
(start-up summary, the election), nothing per write; stderr (the cluster's ts-<i>.log)
gets only WARNING and above."""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio

from revivify.impl.consensus.messages import Peer
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import RpcError, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.tablet.ops import RowOp
from revivify.impl.tserver import api


async def call(address: str, uuid: str, method: str, body: object, response: type) -> object:
    host, port = parse_address(address)
    async with open_rpc_client(host, port, uuid, "observe-test",
                               app_errors=api.APP_ERRORS) as client:
        return await client.call(method, body, response)  # type: ignore[arg-type]


async def create_and_write(c: ProcessCluster, writes: int) -> int:
    """Create t1 on every server, wait for its leader, write through it; the leader."""
    peers = [Peer(s.uuid, s.address) for s in c.servers]
    for s in c.servers:
        await call(s.address, s.uuid, api.ADMIN_CREATE_TABLET, api.CreateTablet("t1", peers),
                   api.TabletCreated)
    with trio.fail_after(30):
        while True:
            for i, s in enumerate(c.servers):
                info = await call(s.address, s.uuid, api.ADMIN_CONSENSUS_STATE,
                                  api.TabletRef("t1"), api.ReplicaInfo)
                if info.role == "LEADER":  # type: ignore[attr-defined]
                    leader = i
                    break
            else:
                await trio.sleep(0.1)
                continue
            break
    s = c.servers[leader]
    for seq in range(writes):
        try:
            await call(s.address, s.uuid, api.DATA_WRITE,
                       api.Write("t1", "w", seq, [RowOp("put", b"k%d" % seq, b"v")]),
                       api.Written)
        except RpcError as exc:  # a leader change meanwhile: rare, and not what is tested
            raise AssertionError(f"write {seq}: {exc}") from None
    return leader


def test_processes_log_events_at_info_to_their_file_and_nothing_per_write(
        tmp_path: Path) -> None:
    with ProcessCluster(str(tmp_path), 3, args=["--log-format", "json"]) as c:
        c.start_all()
        leader = trio.run(create_and_write, c, 200)
        for i in range(3):
            assert c.stop(i) == 0
    docs: list[list[dict[str, str]]] = []
    for s in c.servers:
        path = os.path.join(s.fs_root, "logs", "tserver.log")
        with open(path) as f:
            docs.append([json.loads(line) for line in f])
    for lines in docs:
        messages = [d["message"] for d in lines]
        assert any("serving on" in m and "tablets none" in m for m in messages), messages
        # 200 writes, and the whole life of the server fits in a few dozen lines.
        assert len(lines) < 40, messages
        assert all(d["level"] in ("INFO", "WARNING") for d in lines), lines
    assert any("won the election of term" in d["message"] for d in docs[leader])
    for s in c.servers:
        with open(s.log_path) as f:
            console = f.read()
        assert '"level": "INFO"' not in console  # INFO goes to the file only
    print("\n".join(d["message"] for d in docs[leader]))
