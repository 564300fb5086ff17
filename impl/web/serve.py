"""The HTTP server under the pages: hypercorn's trio worker, in the caller's nursery.

Why hypercorn's trio worker and Starlette: the servers are trio programs whose state is
changed by tasks of one trio run; a web server in that same run (no thread, no second event
loop) reads the state between two of its checkpoints, so a page never sees a change half
made and needs no lock. hypercorn serves ASGI on trio natively; Starlette runs on trio
through anyio. Every handler is ``async def`` (Starlette runs plain functions in a thread
pool, which would break that rule).

The limits below keep a bad client from costing the server more than a few sockets: a
request's head must arrive within READ_TIMEOUT seconds and fit MAX_HEAD_BYTES (hypercorn
answers 400 or closes otherwise), and an idle keep-alive connection is closed after
KEEP_ALIVE seconds. Each connection is one trio task; RPC is served by other tasks of the
same run, so a slow or stuck HTTP client holds none of them up.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from revivify.impl.rpc.address import format_address

READ_TIMEOUT = 10  # seconds for a request's head (a half-sent request is dropped)
KEEP_ALIVE = 5.0  # seconds an idle connection is kept
MAX_HEAD_BYTES = 16 * 1024  # request line and headers; more is refused
GRACEFUL = 1.0  # seconds a page in flight gets at shutdown

logger = logging.getLogger("revivify.web")


def _config(host: str, port: int) -> Config:
    config = Config()
    config.bind = [format_address(host, port)]
    config.accesslog = None
    config.errorlog = logger
    config.read_timeout = READ_TIMEOUT
    config.keep_alive_timeout = KEEP_ALIVE
    config.h11_max_incomplete_size = MAX_HEAD_BYTES
    config.graceful_timeout = GRACEFUL
    config.include_server_header = False
    return config


async def serve_web(app: Any, host: str, port: int, *,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` on HOST:PORT (0: any free port) until cancelled; ``started`` with the
    bound ``HOST:PORT``. A port that cannot be bound raises OSError from ``start``."""
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(functools.partial(serve, app, _config(host, port)))
        task_status.started(binds[0].removeprefix("http://"))


__all__ = ["serve_web"]
