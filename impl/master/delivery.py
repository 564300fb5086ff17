"""Delivery of the calls a committed plan releases to tablet servers.

Calls are sent only after their plan committed (runner.py), each traced ``master_call``
once and then delivered by its own task, retried with a backoff for at most
``call_retry_seconds``, and each attempt only while this master is still the ready leader
of the term that released it and its committed snapshot still calls for it (calls.py
"Every attempt re-checked": a CreateTablet retried after the DeleteTablet DELETED of its
table would recreate the deleted replica at term 0); a DeleteTablet waits for a
CreateTablet attempt to the same replica that is on the wire; what is lost then (or with a
dead master) is re-driven by reports and by the background task. The same call (dest,
method, tablet) is delivered by one task at a time: released again while in flight, it is
not traced or sent twice.

An answer that makes a call moot counts as done: TabletAlreadyExists and TabletDeleted for
CreateTablet (every create carries the releasing term, ``master_term``: a tablet server
refuses a master's create for a tablet it deleted with mode DELETED), TabletNotFound for
DeleteTablet, a refused CAS, InvalidArgument, UnknownMethod (a tablet server older than
Admin.AlterSchema). A ChangeConfig answered NotLeader, TabletNotRunning or TabletNotFound
is moot too: it was decided on a leader the records no longer agree with, so the healing
policy's mark for it is dropped (``forget_change``) and it decides again from fresher
records.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Final

import attrs
import msgspec
import trio

from revivify.impl.rpc import RpcError, UnknownMethod, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.rpc.backoff import Backoff
from revivify.impl.tserver import api as ts_api
from revivify.impl.tserver.master_api import ADMIN_ALTER_SCHEMA

from .calls import Body, TabletServerCall, still_called_for
from .counts import MasterMetrics
from .embedded import EmbeddedServer, master_logger
from .gate import ReadyGate
from .tracing import call_fact

logger = master_logger()

CALL_RETRY: Final = Backoff(initial=0.1, max=2.0, multiplier=2.0, jitter=0)

_RESPONSE_OF: Final[dict[str, type[msgspec.Struct]]] = {
    ts_api.ADMIN_CREATE_TABLET: ts_api.TabletCreated,
    ts_api.ADMIN_DELETE_TABLET: ts_api.Ack,
    ts_api.ADMIN_CHANGE_CONFIG: ts_api.ConfigChanged,
    ADMIN_ALTER_SCHEMA: ts_api.Ack,
}

CallKey = tuple[str, str, str]  # (dest, method, tablet id): one delivery task at a time


@attrs.define
class CallInFlight:
    """One call being delivered, as the ``/operations`` page shows it (no part of the
    protocol: the delivery task updates it, the page reads a copy)."""

    call: TabletServerCall
    term: int
    started: float  # trio time of the release
    attempts: int = 0
    last_error: str = ""


class CallDelivery:
    """Sends released calls, each by its own task in the master's nursery (``nursery``,
    set by open_master before anything is released)."""

    def __init__(self, embedded: EmbeddedServer, gate: ReadyGate, *,
                 call_retry_seconds: float, call_timeout: float,
                 forget_change: Callable[[str], None],
                 metrics: MasterMetrics | None = None) -> None:
        self._embedded = embedded
        self._metrics = metrics
        self._gate = gate
        self._call_retry_seconds = call_retry_seconds
        self._call_timeout = call_timeout
        self._forget_change = forget_change
        self.nursery: trio.Nursery | None = None
        self._inflight: dict[CallKey, CallInFlight] = {}
        # (dest, tablet id) -> CreateTablet attempts on the wire there, and the event set
        # when the last of them ends (a DeleteTablet to that replica waits for it).
        self._creates_on_wire: dict[tuple[str, str], tuple[int, trio.Event]] = {}

    def send_calls(self, calls: tuple[TabletServerCall, ...], term: int) -> None:
        """Release ``calls`` (decided by the ready leader of ``term``): each is traced
        (``master_call``) and then delivered by its own task."""
        for call in calls:
            key = (call.dest, call.method, call.tablet_id)
            if key in self._inflight:
                continue  # the same call is already being retried
            self._inflight[key] = CallInFlight(call, term, self._embedded.now())
            self._embedded.tracer.event("master_call", call_fact(term, call))
            assert self.nursery is not None
            self.nursery.start_soon(self._deliver, call, key, term)

    def in_flight(self) -> list[CallInFlight]:
        """A copy of the calls being delivered, oldest first (the status pages)."""
        return sorted((attrs.evolve(c) for c in self._inflight.values()),
                      key=lambda c: c.started)

    def _failed(self, call: TabletServerCall, exc: BaseException) -> None:
        found = self._inflight.get((call.dest, call.method, call.tablet_id))
        if found is not None:
            found.last_error = f"{type(exc).__name__}: {exc}"

    def _address_for(self, call: TabletServerCall) -> str | None:
        address = self._embedded.tmap().address(call.dest)
        if address is None and isinstance(call.body, ts_api.CreateTablet):
            peer = next((p for p in call.body.peers if p.uuid == call.dest), None)
            address = peer.address if peer else None
        return address

    def _still_wanted(self, call: TabletServerCall, term: int) -> bool | None:
        """May an attempt of ``call``, released in ``term``, leave now (calls.py "Every
        attempt re-checked")? True yes; False never again (moot); None not now (this
        leader's snapshot awaits a rebuild: it may not be the committed catalog)."""
        if self._gate.ready_term != term:
            # Deposed (a master never leads the same term twice) or never ready again in
            # it: the new leader re-drives what its records call for (nudges, reports).
            return False
        if self._gate.needs_rebuild:
            return None
        return still_called_for(self._gate.catalog, call)

    async def _creates_ended(self, dest: str, tablet_id: str) -> None:
        """Wait until no CreateTablet attempt to (dest, tablet) is on the wire: a delete
        sent while one is might be overtaken by it (each attempt is bounded by
        ``call_timeout``, so this is too)."""
        while (on_wire := self._creates_on_wire.get((dest, tablet_id))) is not None:
            await on_wire[1].wait()

    async def _deliver(self, call: TabletServerCall, key: CallKey, term: int) -> None:
        try:
            deadline = self._embedded.now() + self._call_retry_seconds
            failures = 0
            while self._embedded.now() < deadline:
                wanted = self._still_wanted(call, term)
                if wanted is False:
                    logger.info("%s to %s for %s: moot (not called for by the catalog of "
                                "a ready leader of term %d any more)", call.method,
                                call.dest, call.tablet_id, term)
                    return
                if wanted is True and isinstance(call.body, ts_api.DeleteTablet):
                    await self._creates_ended(call.dest, call.tablet_id)
                    wanted = self._still_wanted(call, term)  # checked again after a wait
                address = self._address_for(call) if wanted else None
                if address is not None:
                    self._inflight[key].attempts += 1
                    if await self._try_call(call, address, term):
                        return
                failures += 1
                await trio.sleep(CALL_RETRY.delay(failures))
            logger.info("gave up on %s to %s for %s (reports re-drive it)", call.method,
                        call.dest, call.tablet_id)
        finally:
            self._inflight.pop(key, None)

    @contextlib.contextmanager
    def _on_wire(self, call: TabletServerCall) -> Iterator[None]:
        """Count a CreateTablet attempt as on the wire for the block (no-op for others)."""
        if not isinstance(call.body, ts_api.CreateTablet):
            yield
            return
        pair = (call.dest, call.tablet_id)
        count, ended = self._creates_on_wire.get(pair, (0, trio.Event()))
        self._creates_on_wire[pair] = (count + 1, ended)
        try:
            yield
        finally:
            count, ended = self._creates_on_wire[pair]
            if count == 1:
                del self._creates_on_wire[pair]
                ended.set()
            else:
                self._creates_on_wire[pair] = (count - 1, ended)

    async def _try_call(self, call: TabletServerCall, address: str, term: int) -> bool:
        """One attempt, counted by method and result; True when the call is done or moot."""
        done = await self._attempt(call, address, term)
        if self._metrics is not None:
            self._metrics.call(call.method, "done" if done else "retry").inc()
        return done

    async def _attempt(self, call: TabletServerCall, address: str, term: int) -> bool:
        host, port = parse_address(address)
        # A CreateTablet attempt counts as on the wire from here (the caller's check, no
        # checkpoint since) until it ends: a DeleteTablet released meanwhile waits for it.
        with self._on_wire(call):
            try:
                with trio.fail_after(self._call_timeout):
                    async with open_rpc_client(host, port, call.dest, self._embedded.uuid,
                                               app_errors=ts_api.APP_ERRORS,
                                               network=self._embedded.network) as client:
                        # Checked again once connected: the catalog may have changed while
                        # the connection opened (the closest check to the send we have).
                        wanted = self._still_wanted(call, term)
                        if not wanted:
                            return wanted is False  # moot: done; not now: retry later
                        await client.call(call.method, _with_term(call, term),
                                          _RESPONSE_OF[call.method])
                logger.log(_level(call), "%s to %s for %s: done (%s)", call.method,
                           call.dest, call.tablet_id, call.why)
                return True
            except (ts_api.TabletAlreadyExists, ts_api.TabletDeleted,
                    ts_api.ConfigChangeRefused, ts_api.InvalidArgument, UnknownMethod) as exc:
                logger.log(_level(call), "%s to %s for %s: moot: %s", call.method,
                           call.dest, call.tablet_id, exc)
                return True
            except (ts_api.NotLeader, ts_api.TabletNotRunning) as exc:
                self._failed(call, exc)
                if call.method == ts_api.ADMIN_CHANGE_CONFIG:
                    logger.info("%s to %s for %s: moot: %s", call.method, call.dest,
                                call.tablet_id, exc)
                    self._forget_change(call.tablet_id)
                    return True
                return False
            except ts_api.TabletNotFound:
                if call.method == ts_api.ADMIN_CHANGE_CONFIG:
                    self._forget_change(call.tablet_id)
                    return True
                return call.method == ts_api.ADMIN_DELETE_TABLET
            except (RpcError, OSError, trio.TooSlowError) as exc:
                self._failed(call, exc)
                logger.debug("%s to %s for %s: %s", call.method, call.dest, call.tablet_id,
                             exc)
                return False


def _level(call: TabletServerCall) -> int:
    """How loud a call's end is: a config change is an event an operator follows (INFO);
    CreateTablet and DeleteTablet go by the replica (thousands for a large table), and
    the table's creation or deletion has its own line, so their ends are DEBUG."""
    return logging.INFO if call.method == ts_api.ADMIN_CHANGE_CONFIG else logging.DEBUG


def _with_term(call: TabletServerCall, term: int) -> Body:
    """The body as sent: a create carries the releasing term, so the server refuses it
    for a tablet it deleted (TabletDeleted: a late copy, moot)."""
    if isinstance(call.body, ts_api.CreateTablet):
        return msgspec.structs.replace(call.body, master_term=term)
    return call.body


__all__ = ["CALL_RETRY", "CallDelivery", "CallKey"]
