"""Talking to the masters: find the ready leader, follow its hints, retry what is retryable.

Seed 004 "Clients behave much like tservers: they are configured a priori with the entire
master Raft configuration, must always communicate with the leader master, and will retry
their requests until the new leader master is found." `master_call` does that for one
request: it asks the masters in turn (a MasterNotLeader hint first), learns each master's
UUID by the handshake (connections.py), and retries, with the client's backoff, until the
deadline (ClientOptions.deadline) on:

    MasterNotLeader             follow the hint (at once), else the next master
    ServiceUnavailable          a leader not ready yet (the leader-ready gate): again later
    CatalogWriteFailed          the one catalog write did not commit; nothing changed
    Refused, retryable          NAME_RESERVED, NOT_ENOUGH_SERVERS: again later
    a connection error          the next master

and gives up at once with Rejected(address, error) on a refusal that retrying cannot
change (NOT_FOUND, ALREADY_PRESENT, INVALID_ARGUMENT, ...). A CreateTable carries a
request id, so a retry of one that did commit answers OK with the same table.

`master_status` asks one master, whatever its role (``revivify master status``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

import msgspec
import trio

from revivify.impl.master import api
from revivify.impl.rpc import RpcError, WrongServerUuid, open_rpc_client

from .connections import handshake
from .errors import DeadlineExceeded, Rejected
from .options import ClientOptions, parse_address

T = TypeVar("T", bound=msgspec.Struct)

CLIENT_UUID = "revivify-client"


async def _call_one(address: str, uuid: str, method: str, body: msgspec.Struct,
                    response: type[T]) -> T:
    host, port = parse_address(address)
    async with open_rpc_client(host, port, uuid, CLIENT_UUID,
                               app_errors=api.APP_ERRORS) as client:
        return await client.call(method, body, response)


async def master_status(address: str) -> api.MasterStatus:
    """One master's view of itself (any role)."""
    parse_address(address)
    uuid = await handshake(address, CLIENT_UUID)
    return await _call_one(address, uuid, api.MASTER_STATUS, api.Empty(), api.MasterStatus)


async def master_call(masters: Sequence[str], method: str, body: msgspec.Struct,
                      response: type[T], options: ClientOptions | None = None) -> T:
    """``method`` answered by the ready leader master (module docstring)."""
    options = options or ClientOptions()
    for address in masters:
        parse_address(address)
    uuids: dict[str, str] = {}
    attempts = 0
    last: BaseException | None = None
    hint: str | None = None
    rng = random.Random()
    with trio.move_on_after(options.deadline):
        while True:
            order = ([hint] if hint else []) + [m for m in masters if m != hint]
            tried: set[str] = set()
            hint = None
            for address in order:
                attempts += 1
                tried.add(address)
                try:
                    if address not in uuids:
                        uuids[address] = await handshake(address, CLIENT_UUID)
                    return await _call_one(address, uuids[address], method, body, response)
                except api.MasterNotLeader as exc:
                    last = exc
                    if exc.leader_address and exc.leader_address not in tried:
                        hint = exc.leader_address
                        break  # follow a hint not yet tried in this round at once
                except api.Refused as exc:
                    if not exc.retryable:
                        raise Rejected(address, exc) from None
                    last = exc
                    break  # the leader answered: wait, then ask it again
                except WrongServerUuid as exc:
                    uuids.pop(address, None)  # a wiped master: a new handshake
                    last = exc
                except (api.ServiceUnavailable, api.CatalogWriteFailed, RpcError,
                        OSError) as exc:
                    last = exc
            if hint is None:
                await trio.sleep(options.backoff.delay(attempts, rng))
    raise DeadlineExceeded(method, attempts, last)


__all__ = ["CLIENT_UUID", "master_call", "master_status"]
