"""MemoryNetwork: a deterministic in-memory network with partitions, drops, delays, crashes.

The transport of deterministic tests: one implementation of the RPC layer's Network seam
(revivify.impl.rpc.transport), the other being real TCP. It is a test double, so it lives in
revivify.impl.testing and the RPC package never imports it. No sockets: streams are this
module's own trio.abc.Stream, so servers and clients run unchanged under
trio.testing.MockClock(autojump_threshold=0), and a test that sleeps a minute of virtual
time takes a millisecond.

Model
-----
* Hosts are names (``"ts-1"``, ``"master-2"``, ``"client"``); addresses are (host, port)
  pairs, as for TCP. A node (one process) gets its view of the network with
  ``net.host(name)``, a MemoryHost, and passes it as ``network=`` to serve_rpc and
  open_rpc_client. A MemoryHost listens only on its own name (EADDRNOTAVAIL otherwise), and
  every connection it opens comes from its name: that is how partitions know which side of a
  cut a connection is on. Port 0 picks the host's next free port, from 49152 up.
* A connection is two pipes, one per direction. A pipe is a FIFO of chunks (one per
  ``send_all``), each stamped with the time it may be delivered. ``send_all`` returns once
  the chunk is queued and the pipe holds at most `window` bytes (flow control, like TCP's
  receive window: a receiver that stops reading stops its sender).
* Closing is TCP's: ``aclose`` sends EOF (the peer reads the queued data, then b"") and
  stops receiving (the peer's later sends raise BrokenResourceError); ``send_eof``
  half-closes. A *broken* connection (reset) discards what was queued, and every operation
  on either end raises BrokenResourceError.

Faults (every one is appended to `MemoryNetwork.events` and logged at INFO)
---------------------------------------------------------------------------
* ``partition(group_a, group_b)``: no host of one group reaches a host of the other. Live
  connections across the cut are broken at once (both ends see BrokenResourceError, so RPC
  calls in flight raise ConnectionClosed), and new connections across it fail with
  OSError(EHOSTUNREACH), which open_rpc_client raises as ConnectFailed. Cuts accumulate;
  ``heal()`` removes them all. (A real partition makes connects time out instead of failing;
  failing at once keeps tests instant and says the same thing: nothing was sent.)
* ``kill(host)``: the process on that host crashes, as far as the network can tell: its
  listeners vanish (their ``accept`` blocks forever, connects get ConnectionRefusedError),
  every connection to or from it is broken, and every MemoryHost handed out for it is dead
  (its connects and listens fail with ENETDOWN). The other half of a crash, stopping the
  node's tasks, is the test's: cancel the scope its server runs in. ``net.host(name)``
  afterwards is the restarted process, free to listen on the same ports again.
* Drops: a link (one direction, src host -> dst host) has LinkFaults(drop_probability,
  delay). In a stream transport a "drop" is a connection reset: a length-prefixed stream
  cannot lose bytes silently (the framing would be corrupt forever after), and TCP itself
  retransmits lost packets until it gives up and resets. So a dropped chunk breaks the
  connection it was sent on, and the sender's ``send_all`` raises BrokenResourceError. A
  drop of a request frame means the call never ran; of a response, that it ran and its
  answer was lost. Both surface as ConnectionClosed ("may or may not have run").
* Delay: a chunk is delivered `delay` seconds after it was sent (the receiver waits, the
  sender does not: latency, not bandwidth). Connecting costs one round trip. Under MockClock
  with autojump, delays are exact and cost no wall time.

Determinism
-----------
All randomness comes from the injected `rng` (a seeded random.Random; the global one is
never used). Each connection draws a seed for each of its two pipes from `rng` when it is
opened; each chunk a pipe carries consumes one draw, whatever the drop probability, so
chunk k of a pipe is dropped exactly when its draw is below the link's probability at that
moment. Hence the same seed and the same sequence of connects and sends give the same
drops, and concurrent traffic on other connections cannot shift them. (trio itself
shuffles the order in which ready tasks run; a workload whose connects race one another
should open them in a fixed order when it needs byte-identical replays.)
"""

from __future__ import annotations

import errno
import itertools
import logging
import math
import operator
import random
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Literal, TypeAlias

import attrs
import trio

from revivify.impl.rpc.transport import Address

logger = logging.getLogger(__name__)

DEFAULT_WINDOW = 256 * 1024
FIRST_EPHEMERAL_PORT = 49152


def _probability(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value}")


def _non_negative(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be finite and >= 0, got {value}")


@attrs.frozen
class LinkFaults:
    """What one direction of a link does to the chunks it carries."""

    drop_probability: float = attrs.field(default=0.0, converter=float,
                                          validator=_probability)
    """Chance that a chunk is dropped, i.e. that its connection is reset."""
    delay: float = attrs.field(default=0.0, converter=float, validator=_non_negative)
    """Seconds between a chunk's send and its delivery."""


NO_FAULTS = LinkFaults()

NetEventKind: TypeAlias = Literal[
    "partition",    # a cut was made (detail: the two groups)
    "heal",         # every cut was removed
    "kill",         # a host crashed (src: the host)
    "drop",         # a chunk was dropped and its connection reset (src -> dst)
    "cut",          # a live connection was broken by a partition or a kill
    "unreachable",  # a connect was refused because of a partition (src -> dst)
    "refused",      # a connect found nothing listening (src -> dst)
]


@attrs.frozen
class NetEvent:
    """One fault, or one thing a fault did to traffic, as a test can assert on it."""

    kind: NetEventKind
    at: float | None  # trio.current_time() (None outside trio.run)
    detail: str
    src: str | None = None  # "host:port", or "host" where no port applies
    dst: str | None = None
    connection: int | None = None  # the connection's number, for drops and cuts


def _now() -> float | None:
    try:
        return trio.current_time()
    except RuntimeError:
        return None


def _show(address: Address) -> str:
    return f"{address[0]}:{address[1]}"


class _Pipe:
    """One direction of a connection: queued chunks, and who waits on them."""

    def __init__(self, src: Address, dst: Address, seed: int) -> None:
        self.src = src
        self.dst = dst
        self.rng = random.Random(seed)
        self.chunks: deque[tuple[float, bytes]] = deque()  # (deliver_at, data)
        self.buffered = 0
        self.last_deliver_at = -math.inf
        self.eof = False  # the sending end sent EOF (or closed)
        self.reader_gone = False  # the receiving end closed
        self.lot = trio.lowlevel.ParkingLot()  # readers and window-blocked senders

    def discard(self) -> None:
        self.chunks.clear()
        self.buffered = 0


class _Connection:
    """Both pipes of one connection, and whether it is broken (reset)."""

    def __init__(self, number: int, client: Address, server: Address,
                 rng: random.Random) -> None:
        self.number = number
        self.client = client
        self.server = server
        self.to_server = _Pipe(client, server, rng.getrandbits(64))
        self.to_client = _Pipe(server, client, rng.getrandbits(64))
        self.broken: str | None = None
        self.open_ends = 2

    def hosts(self) -> tuple[str, str]:
        return (self.client[0], self.server[0])

    def describe(self) -> str:
        return f"connection #{self.number} {_show(self.client)} -> {_show(self.server)}"

    def wake_all(self) -> None:
        self.to_server.lot.unpark_all()
        self.to_client.lot.unpark_all()


class MemoryStream(trio.abc.HalfCloseableStream):
    """One end of an in-memory connection (see the module docstring for its semantics)."""

    def __init__(self, network: MemoryNetwork, connection: _Connection, send_pipe: _Pipe,
                 receive_pipe: _Pipe) -> None:
        self._network = network
        self._connection = connection
        self._send_pipe = send_pipe
        self._receive_pipe = receive_pipe
        self._closed = False
        self._sending = False
        self._receiving = False

    @property
    def local_address(self) -> Address:
        return self._send_pipe.src

    @property
    def remote_address(self) -> Address:
        return self._send_pipe.dst

    @property
    def connection_number(self) -> int:
        return self._connection.number

    @property
    def broken(self) -> bool:
        return self._connection.broken is not None

    def __repr__(self) -> str:
        return (f"<MemoryStream #{self._connection.number} {_show(self.local_address)} -> "
                f"{_show(self.remote_address)}>")

    # ------------------------------------------------------------------ sending

    def _claim_send(self) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True

    def _check_send(self) -> None:
        if self._closed or self._send_pipe.eof:
            raise trio.ClosedResourceError("this stream was closed for sending")
        if self._connection.broken is not None:
            raise trio.BrokenResourceError(f"connection reset: {self._connection.broken}")
        if self._send_pipe.reader_gone:
            raise trio.BrokenResourceError("the peer closed the connection")

    async def _wait_window(self) -> None:
        """Until the pipe holds at most `window` bytes; raises if the stream breaks."""
        pipe = self._send_pipe
        while True:
            if self._closed:
                raise trio.ClosedResourceError("this stream was closed while sending")
            if self._connection.broken is not None:
                raise trio.BrokenResourceError(f"connection reset: {self._connection.broken}")
            if pipe.reader_gone:
                raise trio.BrokenResourceError("the peer closed the connection")
            if pipe.buffered <= self._network.window:
                return
            await pipe.lot.park()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._claim_send()
        try:
            await trio.lowlevel.checkpoint()
            self._check_send()
            if data:
                self._network._transmit(self._connection, self._send_pipe, bytes(data))
            await self._wait_window()
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        self._claim_send()
        try:
            await trio.lowlevel.checkpoint()
            self._check_send()
            await self._wait_window()
        finally:
            self._sending = False

    async def send_eof(self) -> None:
        self._claim_send()
        try:
            await trio.lowlevel.checkpoint()
            if self._closed:
                raise trio.ClosedResourceError("this stream was closed")
            if not self._send_pipe.eof:
                self._send_pipe.eof = True
                self._send_pipe.lot.unpark_all()
        finally:
            self._sending = False

    # ------------------------------------------------------------------ receiving

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None:
            max_bytes = operator.index(max_bytes)
            if max_bytes < 1:
                raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        if self._receiving:
            raise trio.BusyResourceError("another task is receiving on this stream")
        self._receiving = True
        try:
            await trio.lowlevel.checkpoint()
            pipe = self._receive_pipe
            while True:
                if self._closed:
                    raise trio.ClosedResourceError("this stream was closed")
                if self._connection.broken is not None:
                    raise trio.BrokenResourceError(
                        f"connection reset: {self._connection.broken}")
                if pipe.chunks:
                    deliver_at, chunk = pipe.chunks[0]
                    if deliver_at > trio.current_time():
                        with trio.move_on_at(deliver_at):  # a fault may wake us earlier
                            await pipe.lot.park()
                        continue
                    if max_bytes is None or len(chunk) <= max_bytes:
                        pipe.chunks.popleft()
                    else:
                        pipe.chunks[0] = (deliver_at, chunk[max_bytes:])
                        chunk = chunk[:max_bytes]
                    pipe.buffered -= len(chunk)
                    pipe.lot.unpark_all()  # a sender may wait for the window
                    return chunk
                if pipe.eof:
                    return b""
                await pipe.lot.park()
        finally:
            self._receiving = False

    # ------------------------------------------------------------------ closing

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._send_pipe.eof = True  # the peer reads what is queued, then b""
            self._receive_pipe.reader_gone = True  # the peer's sends now fail
            self._receive_pipe.discard()
            self._connection.wake_all()
            self._network._end_closed(self._connection)
        await trio.lowlevel.checkpoint()


class MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    """Accepts the connections made to one address of a MemoryNetwork."""

    def __init__(self, network: MemoryNetwork, address: Address) -> None:
        self._network = network
        self.address = address
        self._backlog: deque[MemoryStream] = deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self.killed = False

    def __repr__(self) -> str:
        state = " killed" if self.killed else " closed" if self._closed else ""
        return f"<MemoryListener {_show(self.address)}{state}>"

    async def accept(self) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        while True:
            if self._closed:
                raise trio.ClosedResourceError("this listener was closed")
            if self._backlog and not self.killed:
                return self._backlog.popleft()
            await self._lot.park()  # a killed listener waits here until closed

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._network._unbind(self)
            self._reset_backlog("listener closed")
            self._lot.unpark_all()
        await trio.lowlevel.checkpoint()

    def _enqueue(self, stream: MemoryStream) -> None:
        self._backlog.append(stream)
        self._lot.unpark_all()

    def _reset_backlog(self, reason: str) -> None:
        while self._backlog:
            self._network._break(self._backlog.popleft()._connection, reason)

    def _kill(self) -> None:
        self.killed = True
        self._backlog.clear()  # their connections were cut with the host
        self._lot.unpark_all()


class MemoryHost:
    """One node's view of a MemoryNetwork: a transport.Network, until its host is killed."""

    def __init__(self, network: MemoryNetwork, name: str, incarnation: int) -> None:
        self.network = network
        self.name = name
        self.incarnation = incarnation

    def __repr__(self) -> str:
        alive = "" if self.alive else " (killed)"
        return f"<MemoryHost {self.name!r} incarnation {self.incarnation}{alive}>"

    @property
    def alive(self) -> bool:
        return self.network._incarnations.get(self.name, 0) == self.incarnation

    def _check_alive(self) -> None:
        if not self.alive:
            raise OSError(errno.ENETDOWN,
                          f"host {self.name!r} was killed: this view belongs to the dead "
                          f"process (net.host({self.name!r}) is its successor)")

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await self.network._connect(self, host, port)

    async def open_listeners(
        self, host: str, port: int
    ) -> list[trio.abc.Listener[trio.abc.Stream]]:
        await trio.lowlevel.checkpoint()
        return [self.network._bind(self, host, port)]

    def listener_address(self, listener: trio.abc.Listener[trio.abc.Stream]) -> Address:
        if not isinstance(listener, MemoryListener):
            raise TypeError(f"a MemoryHost did not open {listener!r}")
        return listener.address

    def peer_name(self, stream: trio.abc.Stream) -> str:
        if not isinstance(stream, MemoryStream):
            return f"<{type(stream).__name__}>"
        return _show(stream.remote_address)


class MemoryNetwork:
    """Hosts, listeners and connections in memory, with faults a test injects."""

    def __init__(
        self,
        rng: random.Random,
        *,
        default_faults: LinkFaults = NO_FAULTS,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        if not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a seeded random.Random, got {rng!r}")
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        self._rng = rng
        self.default_faults = default_faults
        self.window = window
        self._link_faults: dict[tuple[str, str], LinkFaults] = {}
        self._cuts: set[frozenset[str]] = set()
        self._incarnations: dict[str, int] = {}
        self._next_port: dict[str, int] = {}
        self._listeners: dict[Address, MemoryListener] = {}
        self._connections: dict[int, _Connection] = {}
        self._connection_numbers = itertools.count(1)
        self._events: list[NetEvent] = []

    # ------------------------------------------------------------------ hosts

    def host(self, name: str) -> MemoryHost:
        """The network as the process now running on host `name` sees it."""
        if not name or ":" in name:
            raise ValueError(f"a host name must be non-empty and without ':', got {name!r}")
        return MemoryHost(self, name, self._incarnations.setdefault(name, 0))

    # ------------------------------------------------------------------ observation

    @property
    def events(self) -> Sequence[NetEvent]:
        """Every fault and its effects on traffic, in order."""
        return tuple(self._events)

    def events_of(self, kind: NetEventKind) -> list[NetEvent]:
        return [event for event in self._events if event.kind == kind]

    @property
    def listening(self) -> list[Address]:
        """The addresses with a live listener."""
        return sorted(self._listeners)

    @property
    def connections(self) -> list[tuple[Address, Address]]:
        """(client, server) of every connection not yet broken or closed at both ends."""
        return [(conn.client, conn.server) for conn in self._connections.values()]

    def reachable(self, host_a: str, host_b: str) -> bool:
        """False when a partition separates the two hosts."""
        return host_a == host_b or frozenset((host_a, host_b)) not in self._cuts

    def faults_for(self, src: str, dst: str) -> LinkFaults:
        """The faults of the link that carries chunks from host `src` to host `dst`."""
        return self._link_faults.get((src, dst), self.default_faults)

    # ------------------------------------------------------------------ fault injection

    def set_link_faults(self, src: str, dst: str, faults: LinkFaults, *,
                        both_ways: bool = False) -> None:
        """Faults for chunks from `src` to `dst` (and back, with both_ways)."""
        self._link_faults[(src, dst)] = faults
        if both_ways:
            self._link_faults[(dst, src)] = faults
        logger.info("memnet: link %s %s %s: %s", src, "<->" if both_ways else "->", dst,
                    faults)

    def clear_link_faults(self) -> None:
        """Every link back to `default_faults`."""
        self._link_faults.clear()

    def partition(self, group_a: Iterable[str], group_b: Iterable[str]) -> None:
        """Cut every host of `group_a` off from every host of `group_b` (both ways)."""
        side_a, side_b = frozenset(group_a), frozenset(group_b)
        if not side_a or not side_b:
            raise ValueError("a partition needs two non-empty groups")
        if side_a & side_b:
            raise ValueError(f"hosts on both sides of a partition: {sorted(side_a & side_b)}")
        self._cuts.update(frozenset((a, b)) for a in side_a for b in side_b)
        detail = f"{sorted(side_a)} | {sorted(side_b)}"
        self._record("partition", detail)
        logger.info("memnet: partition %s", detail)
        for conn in list(self._connections.values()):
            client_host, server_host = conn.hosts()
            if not self.reachable(client_host, server_host):
                self._cut(conn, f"partition {detail}")

    def heal(self) -> None:
        """Remove every partition; connections broken by them stay broken."""
        self._cuts.clear()
        self._record("heal", "all partitions removed")
        logger.info("memnet: healed")

    def kill(self, host: str) -> None:
        """Crash the process on `host` (see the module docstring)."""
        self._incarnations[host] = self._incarnations.get(host, 0) + 1
        self._record("kill", f"host {host} killed", src=host)
        logger.info("memnet: kill %s", host)
        for conn in list(self._connections.values()):  # accepted or not yet
            if host in conn.hosts():
                self._cut(conn, f"host {host} killed")
        for address, listener in list(self._listeners.items()):
            if address[0] == host:
                del self._listeners[address]
                listener._kill()

    # ------------------------------------------------------------------ internals

    def _record(self, kind: NetEventKind, detail: str, *, src: str | None = None,
                dst: str | None = None, connection: int | None = None) -> None:
        self._events.append(NetEvent(kind, _now(), detail, src, dst, connection))

    def _port_for(self, host: str) -> int:
        port = self._next_port.get(host, FIRST_EPHEMERAL_PORT)
        while (host, port) in self._listeners:
            port += 1
        self._next_port[host] = port + 1
        return port

    def _bind(self, on: MemoryHost, host: str, port: int) -> MemoryListener:
        on._check_alive()
        if host != on.name:
            raise OSError(errno.EADDRNOTAVAIL,
                          f"cannot listen on {host}:{port} from host {on.name!r}")
        if not 0 <= port <= 65535:
            raise OSError(errno.EINVAL, f"port {port} out of range")
        address = (host, port if port else self._port_for(host))
        if address in self._listeners:
            raise OSError(errno.EADDRINUSE, f"address {_show(address)} already in use")
        listener = MemoryListener(self, address)
        self._listeners[address] = listener
        logger.debug("memnet: listening on %s", _show(address))
        return listener

    def _unbind(self, listener: MemoryListener) -> None:
        if self._listeners.get(listener.address) is listener:
            del self._listeners[listener.address]

    async def _connect(self, on: MemoryHost, host: str, port: int) -> MemoryStream:
        src = on.name
        round_trip = self.faults_for(src, host).delay + self.faults_for(host, src).delay
        if round_trip > 0:
            await trio.sleep(round_trip)  # the handshake
        else:
            await trio.lowlevel.checkpoint()
        on._check_alive()
        target = (host, port)
        if not self.reachable(src, host):
            detail = f"{_show(target)} unreachable from {src}: partitioned"
            self._record("unreachable", detail, src=src, dst=_show(target))
            logger.info("memnet: connect %s", detail)
            raise OSError(errno.EHOSTUNREACH, detail)
        listener = self._listeners.get(target)
        if listener is None:
            detail = f"nothing listens on {_show(target)} (connect from {src})"
            self._record("refused", detail, src=src, dst=_show(target))
            logger.info("memnet: connect refused: %s", detail)
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"connection refused: {detail}")
        conn = _Connection(next(self._connection_numbers), (src, self._port_for(src)), target,
                           self._rng)
        self._connections[conn.number] = conn
        client_end = MemoryStream(self, conn, conn.to_server, conn.to_client)
        server_end = MemoryStream(self, conn, conn.to_client, conn.to_server)
        listener._enqueue(server_end)
        logger.debug("memnet: %s opened", conn.describe())
        return client_end

    def _transmit(self, conn: _Connection, pipe: _Pipe, data: bytes) -> None:
        """Queue one chunk on `pipe`, or drop it and reset the connection."""
        faults = self.faults_for(pipe.src[0], pipe.dst[0])
        draw = pipe.rng.random()  # one draw per chunk, whatever the probability
        if draw < faults.drop_probability:
            detail = (f"{len(data)} bytes {_show(pipe.src)} -> {_show(pipe.dst)} dropped: "
                      f"{conn.describe()} reset")
            self._record("drop", detail, src=_show(pipe.src), dst=_show(pipe.dst),
                         connection=conn.number)
            logger.info("memnet: %s", detail)
            self._break(conn, f"dropped {len(data)} bytes {_show(pipe.src)} -> "
                              f"{_show(pipe.dst)}")
            raise trio.BrokenResourceError(f"connection reset: {conn.broken}")
        deliver_at = max(trio.current_time() + faults.delay, pipe.last_deliver_at)
        pipe.last_deliver_at = deliver_at
        pipe.chunks.append((deliver_at, data))
        pipe.buffered += len(data)
        pipe.lot.unpark_all()

    def _cut(self, conn: _Connection, reason: str) -> None:
        """Break a live connection because of a partition or a kill, and say so."""
        self._record("cut", f"{conn.describe()} broken: {reason}", src=_show(conn.client),
                     dst=_show(conn.server), connection=conn.number)
        logger.info("memnet: %s broken: %s", conn.describe(), reason)
        self._break(conn, reason)

    def _break(self, conn: _Connection, reason: str) -> None:
        if conn.broken is None:
            conn.broken = reason
            conn.to_server.discard()
            conn.to_client.discard()
            conn.wake_all()
        self._connections.pop(conn.number, None)

    def _end_closed(self, conn: _Connection) -> None:
        conn.open_ends -= 1
        if conn.open_ends == 0:
            self._connections.pop(conn.number, None)
