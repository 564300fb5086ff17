"""Bad HTTP clients against a real tablet server that leads a 3-replica tablet: a header
past the limit, a request never finished, 200 idle connections, held past the web
server's read timeout. Raft keeps its heartbeats meanwhile (no replica's term moves: no
follower's election timeout fired), writes are acknowledged, and the pages still answer.
The pages and Raft share one trio run, so a page that blocked it would show here."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

from integration.helpers import Writer, create_tablet, leader, run, state

from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.tablet.ops import RowOp
from revivify.impl.web.serve import READ_TIMEOUT


def _terms(c: ProcessCluster) -> list[int]:
    return [state(c, i, "t1").term for i in range(3)]


def test_bad_http_clients_do_not_stall_raft(tmp_path: Path) -> None:
    with ProcessCluster(str(tmp_path), 3) as c:
        c.start_all()
        create_tablet(c, "t1")
        lead = leader(c, "t1")
        time.sleep(1.0)  # every follower has heard the leader: terms settled
        before = _terms(c)
        host, port = c.servers[lead].web.rsplit(":", 1)
        sockets: list[socket.socket] = []
        try:
            huge = socket.create_connection((host, int(port)), timeout=10)
            huge.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000
                         + b"\r\n\r\n")
            sockets.append(huge)
            sockets += [socket.create_connection((host, int(port)), timeout=10)
                        for _ in range(200)]
            half = socket.create_connection((host, int(port)), timeout=10)
            half.sendall(b"GET /tablets HTTP/1.1\r\nHost: x\r\nX-Slow:")
            sockets.append(half)
            writer = Writer(c, "t1", "abuse-writer")
            deadline = time.monotonic() + READ_TIMEOUT + 2
            writes = 0
            while time.monotonic() < deadline:
                ops = [RowOp("put", f"k{writes}".encode(), b"v")]
                run(lambda ops=ops: writer.write(ops), seconds=10)  # type: ignore[misc]
                writes += 1
                with urllib.request.urlopen(f"http://{c.servers[lead].web}/api/v1/",
                                            timeout=10) as page:
                    assert page.status == 200
                time.sleep(0.2)
        finally:
            for s in sockets:
                s.close()
        assert writes >= 10
        assert _terms(c) == before, "an election happened while the pages were abused"
