"""Benchmark: replicated writes on a 3-replica revivify tablet vs etcd 3.4 vs PySyncObj.

    python bench/tserver.py [--seconds 3] [--rounds 3] [--warmup 1] [--clients 1,16,64,256]
                            [--failover-trials 10] [--systems revivify,etcd,pysyncobj,failover]
                            [--metrics on|off|both] [--quick] [--keep] [--dir DIR]

    # what metrics cost: revivify with metrics on and off side by side, 64 clients
    python bench/tserver.py --systems revivify --metrics both --clients 64

(`make bench-tserver` installs etcd 3.4 from Debian and pysyncobj from PyPI, then runs this.)

One run prints:

1. revivify: 3 tablet servers (one process each) on 127.0.0.1, one tablet with 3 voters,
   writes of one put (8-byte key, 256-byte value) at the leader, for 1, 16, 64, 256
   concurrent clients, with fsync on and with --no-fsync: writes/s, p50 and p99 latency.
2. etcd 3.4 (Debian's etcd-server): 3 members on 127.0.0.1 (fsync on, etcd's default), the
   same workload as PUTs through etcd's v3 HTTP/JSON gateway (POST /v3/kv/put, base64 key and
   value), each client one HTTP/1.1 keep-alive connection to the leader.
3. PySyncObj: 3 nodes (one process each), a ReplDict; the leader's process also runs a small
   TCP frontend (asyncio, 4-byte length-prefixed frames) that calls the replicated
   ``set(key, value, callback=...)`` and answers once the command is committed and applied
   on that node -- what ``sync=True`` waits for, without a thread per client. PySyncObj has no
   fsync (its journal is in memory). It runs twice: with its default config (commands are
   batched once per tick) and with appendEntriesUseBatch=False (its low-latency setting, as in
   its own delay benchmark); the ratio uses whichever is faster.
4. Leader failover: under a light load (2 writers, 10 ms apart) the revivify leader's process
   is killed with SIGKILL; the time until a write succeeds at another server, over N trials
   (the killed server restarted and caught up between trials), against the election timeout
   (tick-ms x election-ticks; the randomised timeout is 1x to 2x that).
5. With ``--metrics both``: revivify runs twice more, its servers started with
   ``--no-metrics`` (every Prometheus family a no-op, impl/observe/metrics.py), interleaved
   with the metrics-on clusters in every round, and a table gives the cost of metrics: the
   median over rounds of 1 - (writes/s with metrics) / (writes/s without), per client count
   and durability (target: under 3%), and the same from the leader's CPU time per write
   (steadier on a shared machine). ``--metrics off`` runs revivify without metrics only.
6. The ratios issue 34 sets as targets (revivify / etcd with fsync at 64 clients in every
   round, and at 1 client, with its p50 latency against etcd's; revivify without fsync /
   PySyncObj; failover), with MET / MISSED (figures, not assertions: the exit status does
   not depend on them).
7. ``revivify trace check`` of every revivify cluster's traces, run after the servers have
   stopped: the exit status is 1 if any is not clean (a speed-up that breaks what the
   servers may do is no speed-up).

Client model, the same for the three systems: one load-generator process, separate from the
servers (one trio thread), each client its own TCP connection to the leader with one write in
flight, the next write sent when the previous one is acknowledged; a point runs a warm-up and
then counts the writes acknowledged inside the measured window. All five clusters stay up
during the throughput phase and only one is loaded at a time; each round measures every point
once (the order of the systems rotates between rounds), and a target ratio is the median over
rounds of the ratio measured within a round. The CPU columns (from /proc) say where the time
went: the leader's process, each follower's, and the load generator's. The machine has 2
cores and is shared: the 3 servers and the load generator share them (no pinning), so absolute
figures are noisy; the ratios come from one run, measured side by side. Every process started
runs in its own process group and is killed at the end, and its temp dir is removed, even on
error; each phase runs under a time bound.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio

from revivify.impl.rpc.address import parse_address

KEY_BYTES = 8
VALUE_BYTES = 256
CLIENT_COUNTS = (1, 16, 64, 256)
TABLET = "bench-tablet"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_METRICS = "revivify --no-metrics"  # the system's name in the tables (its kind: revivify)
HINT = "run `make bench-tserver` (it installs etcd-server and pysyncobj)"


class BenchError(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(ordered: list[float], fraction: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# =============================================================================== processes


class Processes:
    """Every child process, each in its own process group; `close` kills what is left."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.live: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        out = open(os.path.join(self.directory, f"{name}.out"), "ab")  # noqa: SIM115
        err = open(os.path.join(self.directory, f"{name}.err"), "ab")  # noqa: SIM115
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, cwd=REPO)
        finally:
            out.close()
            err.close()
        self.live[name] = proc
        return proc

    def output(self, name: str, stream: str = "out") -> str:
        try:
            with open(os.path.join(self.directory, f"{name}.{stream}"), "rb") as f:
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    async def wait_line(self, name: str, marker: str, seconds: float = 30.0) -> str:
        """The first stdout line of `name` containing `marker` (fails if it exits first)."""
        proc = self.live[name]
        with trio.fail_after(seconds):
            while True:
                for line in self.output(name).splitlines():
                    if marker in line:
                        return line
                if proc.poll() is not None:
                    tail = self.output(name, "err")[-2000:]
                    raise BenchError(f"{name} exited ({proc.returncode}) before ready:\n{tail}")
                await trio.sleep(0.05)

    def kill(self, name: str, sig: int = signal.SIGKILL, grace: float = 5.0) -> None:
        proc = self.live.pop(name, None)
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        if sig != signal.SIGKILL:  # the group may still hold children
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    def stop(self, names: list[str]) -> None:
        """SIGTERM each (clean stop), SIGKILL what has not exited after a grace period."""
        for name in names:
            proc = self.live.get(name)
            if proc is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for name in names:
            self.kill(name, signal.SIGTERM, grace=5.0)

    def close(self) -> None:
        for name in list(self.live):
            self.kill(name, signal.SIGKILL, grace=5.0)


# =============================================================================== clients
# Each client kind is an async context manager yielding `put(key, value) -> server` (the
# server that acknowledged it). They run in the load generator, and (revivify only) in the
# orchestrator for the failover phase.


@contextlib.asynccontextmanager
async def revivify_client(servers: dict[str, str], leader: str, client_id: str,
                          call_timeout: float = 5.0
                          ) -> AsyncIterator[Callable[[bytes, bytes], Awaitable[str]]]:
    """Exactly-once writes by (client_id, seq), following NotLeader hints; one connection."""
    from revivify.impl.rpc import ConnectionClosed, RpcError, open_rpc_client
    from revivify.impl.tablet.ops import RowOp
    from revivify.impl.tserver import api

    order = sorted(servers)
    state: dict[str, Any] = {"target": leader, "seq": 0, "uuid": None, "client": None}
    dead_at: dict[str, float] = {}
    stack = contextlib.AsyncExitStack()

    async def connection(uuid: str) -> Any:
        if state["uuid"] == uuid and state["client"] is not None and not state["client"].closed:
            return state["client"]
        await drop()
        host, port = parse_address(servers[uuid])
        state["client"] = await stack.enter_async_context(
            open_rpc_client(host, port, uuid, client_id, app_errors=api.APP_ERRORS))
        state["uuid"] = uuid
        return state["client"]

    async def drop() -> None:
        nonlocal stack
        state["client"] = None
        state["uuid"] = None
        old, stack = stack, contextlib.AsyncExitStack()
        await old.aclose()

    def rotate(uuid: str) -> str:
        return order[(order.index(uuid) + 1) % len(order)]

    async def put(key: bytes, value: bytes) -> str:
        state["seq"] += 1
        request = api.Write(TABLET, client_id, state["seq"], [RowOp("put", key, value)])
        while True:
            target = state["target"]
            try:
                client = await connection(target)  # not under the call's cancel scope
                with trio.fail_after(call_timeout):
                    await client.call(api.DATA_WRITE, request, api.Written)
                return str(target)
            except api.NotLeader as exc:
                hint = exc.leader_uuid
                recently_dead = trio.current_time() - dead_at.get(hint or "", -1e9) < 0.2
                if hint in servers and hint != target and not recently_dead:
                    state["target"] = hint
                else:
                    state["target"] = rotate(target)
                    await trio.sleep(0.005)
            except api.OperationAborted:
                await trio.sleep(0.002)  # same (client_id, seq): applied at most once
            except (ConnectionClosed, RpcError, trio.TooSlowError, OSError):
                dead_at[target] = trio.current_time()
                await drop()
                state["target"] = rotate(target)
                await trio.sleep(0.005)

    try:
        yield put
    finally:  # connections were entered at this task's cancel-scope level: leave them here
        await stack.aclose()


class HttpConnection:
    """A minimal HTTP/1.1 keep-alive client on one trio TCP stream (POST only)."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host.encode()
        self.buffer = bytearray()

    async def _fill(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise BenchError("HTTP server closed the connection")
        self.buffer += data

    async def _read_until(self, marker: bytes) -> bytes:
        while True:
            at = self.buffer.find(marker)
            if at >= 0:
                out = bytes(self.buffer[:at])
                del self.buffer[:at + len(marker)]
                return out
            await self._fill()

    async def _read_exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            await self._fill()
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        head = (f"POST {path} HTTP/1.1\r\nHost: ".encode() + self.host
                + b"\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode() + b"\r\n\r\n")
        await self.stream.send_all(head + body)
        lines = (await self._read_until(b"\r\n\r\n")).split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if b"content-length" in headers:
            return status, await self._read_exactly(int(headers[b"content-length"]))
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            parts: list[bytes] = []
            while True:
                size = int((await self._read_until(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self._read_until(b"\r\n")
                    return status, b"".join(parts)
                parts.append(await self._read_exactly(size))
                await self._read_exactly(2)
        raise BenchError(f"HTTP response without a length: {lines[0]!r}")


@contextlib.asynccontextmanager
async def open_http(address: str) -> AsyncIterator[HttpConnection]:
    host, port = parse_address(address)
    stream = await trio.open_tcp_stream(host, port)  # TCP_NODELAY is trio's default
    try:
        yield HttpConnection(stream, address)
    finally:
        await trio.aclose_forcefully(stream)


@contextlib.asynccontextmanager
async def etcd_client(address: str) -> AsyncIterator[Callable[[bytes, bytes], Awaitable[str]]]:
    async with open_http(address) as http:
        async def put(key: bytes, value: bytes) -> str:
            body = json.dumps({"key": base64.b64encode(key).decode(),
                               "value": base64.b64encode(value).decode()}).encode()
            status, answer = await http.post("/v3/kv/put", body)
            if status != 200 or b'"error"' in answer:
                raise BenchError(f"etcd put failed: {status} {answer[:200]!r}")
            return address
        yield put


class FramedConnection:
    """4-byte big-endian length + payload, both ways (the PySyncObj frontend's protocol)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def call(self, payload: bytes) -> bytes:
        await self.stream.send_all(len(payload).to_bytes(4, "big") + payload)
        while True:
            if len(self.buffer) >= 4:
                n = int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) >= 4 + n:
                    out = bytes(self.buffer[4:4 + n])
                    del self.buffer[:4 + n]
                    return out
            data = await self.stream.receive_some(65536)
            if not data:
                raise BenchError("frontend closed the connection")
            self.buffer += data


@contextlib.asynccontextmanager
async def open_framed(address: str) -> AsyncIterator[FramedConnection]:
    host, port = parse_address(address)
    stream = await trio.open_tcp_stream(host, port)
    try:
        yield FramedConnection(stream)
    finally:
        await trio.aclose_forcefully(stream)


@contextlib.asynccontextmanager
async def syncobj_client(address: str
                         ) -> AsyncIterator[Callable[[bytes, bytes], Awaitable[str]]]:
    async with open_framed(address) as conn:
        async def put(key: bytes, value: bytes) -> str:
            answer = await conn.call(b"P" + key + value)
            if answer != b"\x00":
                raise BenchError(f"pysyncobj set failed: error code {answer!r}")
            return address
        yield put


# =============================================================================== load generator
# `python bench/tserver.py _loadgen SPEC_JSON`: runs the clients, prints one JSON line.


async def loadgen(spec: dict[str, Any]) -> dict[str, Any]:
    clients, warmup, seconds = int(spec["clients"]), float(spec["warmup"]), float(spec["seconds"])
    system = spec["system"]
    latencies: list[float] = []
    count = 0
    ready = 0
    all_ready = trio.Event()

    def make(i: int) -> contextlib.AbstractAsyncContextManager[
            Callable[[bytes, bytes], Awaitable[str]]]:
        if system == "revivify":
            return revivify_client(spec["servers"], spec["leader"], f"{spec['tag']}-c{i}")
        if system == "etcd":
            return etcd_client(spec["address"])
        if system == "pysyncobj":
            return syncobj_client(spec["address"])
        raise BenchError(f"unknown system {system!r}")

    window: list[float] = []

    async def client(i: int) -> None:
        nonlocal count, ready
        rng = random.Random(f"{spec['tag']}-{i}")
        value = rng.randbytes(VALUE_BYTES)
        async with make(i) as put:
            ready += 1
            await all_ready.wait()
            w0, w1 = window
            while True:
                began = trio.current_time()
                if began >= w1:
                    return
                await put(rng.randbytes(KEY_BYTES), value)
                done = trio.current_time()
                if w0 <= done <= w1:
                    count += 1
                    latencies.append(done - began)

    async with trio.open_nursery() as nursery:
        for i in range(clients):
            nursery.start_soon(client, i)
        with trio.fail_after(30):
            while ready < clients:  # connect everyone before the clock starts
                await trio.sleep(0.01)
        now = trio.current_time()
        window.extend([now + warmup, now + warmup + seconds])
        all_ready.set()
        print(json.dumps({"window_in": warmup}), flush=True)  # the orchestrator samples CPU
        await trio.sleep_until(window[0])
        cpu0 = time.process_time()
        await trio.sleep_until(window[1])
        cpu = time.process_time() - cpu0
    latencies.sort()
    return {"count": count, "seconds": seconds, "rate": count / seconds,
            "client_cpu": cpu / seconds, "lat_us": [round(x * 1e6) for x in latencies],
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000}


def loadgen_main(spec_json: str) -> int:
    result = trio.run(loadgen, json.loads(spec_json))
    print(json.dumps(result), flush=True)
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_loadgen(procs: Processes, spec: dict[str, Any], servers: list[str], leader: str
                      ) -> dict[str, Any]:
    """Run one point in a load-generator process; sample the servers' CPU in its window."""
    name = f"loadgen-{spec['tag']}"
    procs.spawn(name, [sys.executable, os.path.abspath(__file__), "_loadgen", json.dumps(spec)])
    proc = procs.live[name]
    pids = {n: procs.live[n].pid for n in servers}
    cpu: dict[str, float] = {}
    with trio.fail_after(float(spec["warmup"]) + float(spec["seconds"]) + 60):
        while "window_in" not in procs.output(name) and proc.poll() is None:
            await trio.sleep(0.01)
        if proc.poll() is None:
            await trio.sleep(float(spec["warmup"]))
            before = {n: cpu_seconds(pid) for n, pid in pids.items()}
            await trio.sleep(float(spec["seconds"]))
            cpu = {n: (cpu_seconds(pid) - before[n]) / float(spec["seconds"])
                   for n, pid in pids.items()}
        while proc.poll() is None:
            await trio.sleep(0.05)
    procs.kill(name)
    if proc.returncode != 0:
        raise BenchError(f"load generator failed ({proc.returncode}):\n"
                         + procs.output(name, "err")[-3000:])
    result = dict(json.loads(procs.output(name).strip().splitlines()[-1]))
    followers = [v for n, v in cpu.items() if n != leader]
    result["leader_cpu"] = cpu.get(leader, float("nan"))
    result["follower_cpu"] = statistics.fmean(followers) if followers else float("nan")
    return result


# =============================================================================== PySyncObj node
# `python bench/tserver.py _syncobj SPEC_JSON`: one PySyncObj node plus its TCP frontend.


def syncobj_main(spec_json: str) -> int:
    import asyncio

    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf
    from pysyncobj.batteries import ReplDict

    spec = json.loads(spec_json)
    store = ReplDict()
    conf = SyncObjConf(appendEntriesUseBatch=bool(spec["batch"]))
    node = SyncObj(spec["self"], spec["partners"], conf=conf, consumers=[store])

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                head = await reader.readexactly(4)
                payload = await reader.readexactly(int.from_bytes(head, "big"))
                if payload[:1] == b"P":
                    done: asyncio.Future[int] = loop.create_future()

                    def applied(result: Any, error: int, done: asyncio.Future[int] = done
                                ) -> None:
                        loop.call_soon_threadsafe(done.set_result, error)

                    store.set(payload[1:1 + KEY_BYTES], payload[1 + KEY_BYTES:],
                              callback=applied)
                    error = await done
                    answer = b"\x00" if error == FAIL_REASON.SUCCESS else bytes([error or 255])
                else:  # status
                    status = node.getStatus()
                    leader = status["leader"]
                    answer = json.dumps({
                        "self": str(status["self"].address),
                        "leader": None if leader is None else str(leader.address),
                        "commit": status["commit_idx"]}).encode()
                writer.write(len(answer).to_bytes(4, "big") + answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", int(spec["frontend"]))
        print(f"syncobj frontend listening on 127.0.0.1:{spec['frontend']}", flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())
    return 0


# =============================================================================== revivify


class Revivify:
    def __init__(self, procs: Processes, directory: str, tag: str, fsync: bool,
                 args: argparse.Namespace, metrics: bool = True) -> None:
        self.procs = procs
        self.metrics = metrics
        self.directory = directory
        self.tag = tag
        self.fsync = fsync
        self.args = args
        self.names = [f"{tag}-ts{i}" for i in range(3)]
        self.ports = {name: free_port() for name in self.names}
        self.uuid_of: dict[str, str] = {}

    @property
    def servers(self) -> dict[str, str]:  # uuid -> address
        return {self.uuid_of[n]: f"127.0.0.1:{self.ports[n]}" for n in self.names}

    def name_of(self, uuid: str) -> str:
        return next(n for n, u in self.uuid_of.items() if u == uuid)

    async def start_server(self, name: str) -> None:
        argv = [sys.executable, "-m", "revivify.impl.servers.tserver",
                "--fs-root", os.path.join(self.directory, name),
                "--rpc-bind", f"127.0.0.1:{self.ports[name]}",
                "--tick-ms", str(self.args.tick_ms),
                "--election-ticks", str(self.args.election_ticks),
                "--heartbeat-ticks", str(self.args.heartbeat_ticks)]
        if not self.fsync:
            argv.append("--no-fsync")
        if not self.metrics:
            argv.append("--no-metrics")
        self.procs.spawn(name, argv)
        line = await self.procs.wait_line(name, "listening on", 60)
        self.uuid_of[name] = line.split()[2]

    async def start(self) -> None:
        from revivify.impl.consensus.messages import Peer
        from revivify.impl.tserver import api

        for name in self.names:  # one after another: three Python start-ups at once on 2 cores
            await self.start_server(name)
        peers = [Peer(uuid, address) for uuid, address in self.servers.items()]
        for uuid in self.servers:
            await self.call(uuid, api.ADMIN_CREATE_TABLET, api.CreateTablet(TABLET, peers),
                            api.TabletCreated)
        await self.stable_leader()

    async def call(self, uuid: str, method: str, request: Any, response_type: Any) -> Any:
        from revivify.impl.rpc import open_rpc_client
        from revivify.impl.tserver import api

        host, port = parse_address(self.servers[uuid])
        with trio.fail_after(5):
            async with open_rpc_client(host, port, uuid, "bench-admin",
                                       app_errors=api.APP_ERRORS) as client:
                return await client.call(method, request, response_type)

    async def states(self) -> dict[str, Any]:
        from revivify.impl.rpc import RpcError
        from revivify.impl.tserver import api

        out: dict[str, Any] = {}
        for uuid in self.servers:
            if self.name_of(uuid) not in self.procs.live:
                continue
            with contextlib.suppress(RpcError, OSError, trio.TooSlowError):
                out[uuid] = await self.call(uuid, api.ADMIN_CONSENSUS_STATE,
                                            api.TabletRef(TABLET), api.ReplicaInfo)
        return out

    async def stable_leader(self, seconds: float = 60.0, slack: int = 0) -> str:
        """The leader once all three replicas run, agree on it, and have applied its commits
        (up to `slack` entries behind: the states are read one after another, under load)."""
        with trio.fail_after(seconds):
            while True:
                states = await self.states()
                leaders = [u for u, s in states.items() if s.role == "LEADER"]
                if len(states) == 3 and len(leaders) == 1:
                    leader = leaders[0]
                    commit = states[leader].commit_index
                    if all(s.state == "RUNNING" and s.leader == leader
                           and s.applied_index >= commit - slack for s in states.values()):
                        return leader
                await trio.sleep(0.1)

    def stop(self) -> None:
        self.procs.stop([n for n in self.names if n in self.procs.live])


# =============================================================================== etcd


class Etcd:
    def __init__(self, procs: Processes, directory: str) -> None:
        self.procs = procs
        self.directory = directory
        self.names = [f"etcd{i}" for i in range(3)]
        self.client_ports = {n: free_port() for n in self.names}
        self.peer_ports = {n: free_port() for n in self.names}

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.client_ports[name]}"

    async def start(self) -> str:
        cluster = ",".join(f"{n}=http://127.0.0.1:{self.peer_ports[n]}" for n in self.names)
        for n in self.names:
            self.procs.spawn(n, [
                shutil.which("etcd") or "etcd", "--name", n,
                "--data-dir", os.path.join(self.directory, n),
                "--listen-client-urls", f"http://{self.address(n)}",
                "--advertise-client-urls", f"http://{self.address(n)}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_ports[n]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_ports[n]}",
                "--initial-cluster", cluster, "--initial-cluster-state", "new",
                "--initial-cluster-token", "revivify-bench", "--logger", "zap",
                "--log-level", "warn"])
        with trio.fail_after(60):
            while True:
                for n in self.names:
                    if self.procs.live[n].poll() is not None:
                        raise BenchError(f"etcd member {n} exited:\n"
                                         + self.procs.output(n, "err")[-2000:])
                leader = await self.leader()
                if leader is not None:
                    return leader
                await trio.sleep(0.2)

    async def leader(self) -> str | None:
        """The leader's client address, once all three members answer and agree on it."""
        ids: dict[str, str] = {}
        leaders = set()
        for n in self.names:
            try:
                with trio.fail_after(2):
                    async with open_http(self.address(n)) as http:
                        status, body = await http.post("/v3/maintenance/status", b"{}")
            except (OSError, BenchError, trio.TooSlowError):
                return None
            if status != 200:
                return None
            answer = json.loads(body)
            ids[n] = str(answer["header"]["member_id"])
            leaders.add(str(answer.get("leader", "")))
        if len(leaders) != 1:
            return None
        leader = leaders.pop()
        for n, member in ids.items():
            if member == leader:
                return self.address(n)
        return None

    def stop(self) -> None:
        self.procs.stop([n for n in self.names if n in self.procs.live])


# =============================================================================== PySyncObj


class PySyncObjCluster:
    def __init__(self, procs: Processes, tag: str, batch: bool) -> None:
        self.procs = procs
        self.batch = batch
        self.names = [f"{tag}{i}" for i in range(3)]
        self.raft_ports = {n: free_port() for n in self.names}
        self.front_ports = {n: free_port() for n in self.names}

    async def start(self) -> str:
        nodes = {n: f"127.0.0.1:{self.raft_ports[n]}" for n in self.names}
        for n in self.names:
            spec = {"self": nodes[n], "partners": [a for m, a in nodes.items() if m != n],
                    "frontend": self.front_ports[n], "batch": self.batch}
            self.procs.spawn(n, [sys.executable, os.path.abspath(__file__), "_syncobj",
                                 json.dumps(spec)])
        for n in self.names:
            await self.procs.wait_line(n, "listening on", 60)
        return await self.find_leader()

    async def find_leader(self) -> str:
        """The leader's frontend address, once all three nodes agree on the leader."""
        raft_to_front = {f"127.0.0.1:{self.raft_ports[n]}": f"127.0.0.1:{self.front_ports[n]}"
                         for n in self.names}
        with trio.fail_after(60):
            while True:
                leaders = set()
                for n in self.names:
                    with trio.fail_after(2):
                        async with open_framed(f"127.0.0.1:{self.front_ports[n]}") as conn:
                            leaders.add(json.loads(await conn.call(b"S"))["leader"])
                if len(leaders) == 1 and None not in leaders:
                    return raft_to_front[leaders.pop()]
                await trio.sleep(0.2)

    def stop(self) -> None:
        self.procs.stop([n for n in self.names if n in self.procs.live])


# =============================================================================== phases


class Target:
    """One system in one configuration, running: where its load goes, who leads it."""

    def __init__(self, system: str, durability: str, cluster: Any) -> None:
        self.system = system
        self.durability = durability
        self.kind = system.split()[0].lower()  # revivify | etcd | pysyncobj
        self.cluster = cluster

    @property
    def key(self) -> tuple[str, str]:
        return (self.system, self.durability)

    async def locate(self) -> tuple[dict[str, Any], str]:
        """(the load generator's target spec, the leader's process name), found afresh."""
        c = self.cluster
        with trio.fail_after(60):
            if isinstance(c, Revivify):
                leader = await c.stable_leader(slack=50)
                return {"servers": c.servers, "leader": leader}, c.name_of(leader)
            if isinstance(c, Etcd):
                while (address := await c.leader()) is None:
                    await trio.sleep(0.2)
                return {"address": address}, next(n for n in c.names if c.address(n) == address)
            assert isinstance(c, PySyncObjCluster)
            address = await c.find_leader()
            return {"address": address}, next(
                n for n in c.names if f"127.0.0.1:{c.front_ports[n]}" == address)


Slice = dict[str, Any]  # one point in one round: rate, count, seconds, CPU, latencies


async def measure_slice(procs: Processes, args: argparse.Namespace, target: Target,
                        clients: int) -> Slice:
    spec, leader = await target.locate()
    spec = dict(spec, system=target.kind, clients=clients, warmup=args.warmup,
                seconds=args.seconds, tag=f"{target.kind}-{clients}-{time.time_ns()}")
    result = await run_loadgen(procs, spec, target.cluster.names, leader)
    print(f"  {target.system:<9} {target.durability:<22} {clients:>4} clients: "
          f"{result['rate']:8.0f} writes/s  p50 {result['p50_ms']:7.2f} ms  "
          f"p99 {result['p99_ms']:7.2f} ms  CPU leader {result['leader_cpu']:.2f} "
          f"follower {result['follower_cpu']:.2f} client {result['client_cpu']:.2f}",
          file=sys.stderr, flush=True)
    return result


async def idle_cpu(procs: Processes, seconds: float = 2.0) -> float:
    """Cores used by every live process while no load runs (the background cost)."""
    pids = [p.pid for p in procs.live.values()]
    before = [cpu_seconds(pid) for pid in pids]
    await trio.sleep(seconds)
    return sum(cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)) / seconds


async def failover_phase(procs: Processes, args: argparse.Namespace, directory: str
                         ) -> list[float]:
    cluster = Revivify(procs, os.path.join(directory, "rv-failover"), "rv-fo", True, args)
    times: list[float] = []
    try:
        with trio.fail_after(120):
            await cluster.start()
        successes: list[tuple[float, str]] = []  # (time acknowledged, server)

        async def writer(i: int) -> None:
            rng = random.Random(i)
            value = rng.randbytes(VALUE_BYTES)
            leader = await cluster.stable_leader(slack=50)
            async with revivify_client(cluster.servers, leader, f"failover-{i}",
                                       call_timeout=2.0) as put:
                while True:
                    server = await put(rng.randbytes(KEY_BYTES), value)
                    successes.append((trio.current_time(), server))
                    await trio.sleep(0.01)

        async with trio.open_nursery() as nursery:
            for i in range(2):
                nursery.start_soon(writer, i)
            for trial in range(args.failover_trials):
                with trio.fail_after(90):
                    leader = await cluster.stable_leader(slack=50)
                    await trio.sleep(0.5)  # the load runs at this leader
                    victim = cluster.name_of(leader)
                    killed_at = trio.current_time()
                    procs.kill(victim, signal.SIGKILL)
                    while True:
                        after = [t for t, s in successes if t > killed_at and s != leader]
                        if after:
                            break
                        await trio.sleep(0.002)
                    elapsed = min(after) - killed_at
                    times.append(elapsed)
                    print(f"  failover trial {trial + 1}: {elapsed * 1000:.0f} ms",
                          file=sys.stderr, flush=True)
                    del successes[:]
                    await cluster.start_server(victim)  # same fs-root and port: rejoins
            nursery.cancel_scope.cancel()
    finally:
        cluster.stop()
    return times


# =============================================================================== report


def _rate(slices: list[Slice]) -> float:
    return float(sum(x["count"] for x in slices) / sum(x["seconds"] for x in slices))


def _cpu_us(slices: list[Slice]) -> float:
    """The leader process's CPU time per acknowledged write, in microseconds."""
    busy = sum(x["leader_cpu"] * x["seconds"] for x in slices)
    return float(busy / max(1, sum(x["count"] for x in slices)) * 1e6)


def metrics_cost(results: Results) -> None:
    """The cost of metrics (``--metrics both``): revivify with and without, side by side,
    measured two ways: throughput (what the target names, but on a shared machine the
    other load moves it by tens of percent between rounds) and the leader's CPU time per
    write (what metrics add to a write; steadier, as it does not depend on how much CPU
    the rest of the machine left)."""
    rows = [(d, c) for (s, d, c) in results if s == NO_METRICS
            and ("revivify", d, c) in results]
    if not rows:
        return
    print("Cost of metrics (revivify, servers with metrics vs started with --no-metrics, "
          "interleaved in each round; medians over rounds of the cost within a round): by "
          "throughput, 1 - (writes/s on) / (writes/s off); by CPU, (leader CPU us per write "
          "on) / (off) - 1.")
    print("| durability | clients | writes/s on / off | cost per round | cost (writes/s) | "
          "leader CPU us/write on / off | cost per round | cost (CPU) | p50 ms on / off | "
          "target | verdict (writes/s, CPU) |")
    print("|---|---:|---|---|---:|---|---|---:|---|---:|---|")
    for durability, clients in rows:
        on, off = results["revivify", durability, clients], results[NO_METRICS, durability,
                                                                   clients]
        pairs = list(zip(on, off, strict=True))
        by_rate = [1 - a["rate"] / b["rate"] for a, b in pairs]
        by_cpu = [_cpu_us([a]) / _cpu_us([b]) - 1 for a, b in pairs]
        rate_cost, cpu_cost = statistics.median(by_rate), statistics.median(by_cpu)
        p50 = [percentile(sorted(v for x in side for v in x["lat_us"]), 0.5) / 1000
               for side in (on, off)]
        print(f"| {durability} | {clients} | {_rate(on):,.0f} / {_rate(off):,.0f} | "
              f"{' '.join(f'{x:+.1%}' for x in by_rate)} | {rate_cost:+.1%} | "
              f"{_cpu_us(on):.0f} / {_cpu_us(off):.0f} | "
              f"{' '.join(f'{x:+.1%}' for x in by_cpu)} | {cpu_cost:+.1%} | "
              f"{p50[0]:.2f} / {p50[1]:.2f} | < 3% | "
              f"{verdict(rate_cost < 0.03)}, {verdict(cpu_cost < 0.03)} |")
    print()


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


Results = dict[tuple[str, str, int], list[Slice]]  # (system, durability, clients) -> rounds


def check_traces(directory: str) -> list[tuple[str, int, str]]:
    """``revivify trace check`` of each revivify cluster's traces (every server's, stopped
    or killed): (cluster, exit status, its verdict line). A benchmark's speed counts only
    if what the servers did is still what the spec allows."""
    cli = os.path.join(os.path.dirname(sys.executable), "revivify")
    out: list[tuple[str, int, str]] = []
    for tag in sorted(os.listdir(directory)):
        root = os.path.join(directory, tag)
        dirs = sorted(os.path.join(root, n, "traces") for n in
                      (os.listdir(root) if os.path.isdir(root) else ())
                      if os.path.isdir(os.path.join(root, n, "traces")))
        if not dirs:
            continue
        done = subprocess.run([cli, "trace", "check", *dirs], capture_output=True,
                              text=True, timeout=600)
        lines = [x for x in done.stdout.splitlines() if x.startswith("result:")]
        out.append((tag, done.returncode, lines[-1] if lines else done.stderr.strip()[-300:]))
    return out


def report(args: argparse.Namespace, results: Results, idle: float,
           failover: list[float], checked: list[tuple[str, int, str]]) -> None:
    print(f"Replicated writes, 3 replicas on 127.0.0.1, one put per write ({KEY_BYTES}-byte key,"
          f" {VALUE_BYTES}-byte value); each point: {args.rounds} round(s) of {args.seconds:g} s"
          f" measured after {args.warmup:g} s warm-up, rounds interleaved across systems.")
    print(f"Machine: {os.cpu_count()} cores, shared with other work, no pinning. All 5 clusters "
          f"(15 server processes) run throughout the throughput phase; one is loaded at a time "
          f"(the idle ones used {idle:.2f} cores together). Load: 1 separate load-generator "
          "process per point (one trio thread), each client its own TCP connection to the "
          "leader, one write in flight per client. The failover phase runs alone, its 2 writers "
          "in the orchestrator process.")
    print("revivify: raw RPC Data.Write at the leader (exactly-once client_id/seq), traces on. "
          "etcd: HTTP/1.1 keep-alive POST /v3/kv/put (JSON gateway), fsync on (default). "
          "PySyncObj: ReplDict.set through a frontend in the leader's process that answers when "
          "the command is applied (as sync=True); no fsync (in-memory journal).")
    print("CPU columns: cores used in the measured window (1.00 = one core busy) by the leader's "
          "process, by each follower's (mean), and by the load generator; mean over rounds.")
    print()
    print("| system | durability | clients | writes/s | per round | p50 ms | p99 ms | "
          "CPU leader | CPU follower | CPU client |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for (system, durability, clients), slices in results.items():
        rate = sum(x["count"] for x in slices) / sum(x["seconds"] for x in slices)
        lat = sorted(v for x in slices for v in x["lat_us"])
        rounds = " ".join(f"{x['rate']:.0f}" for x in slices)

        def mean(field: str, slices: list[Slice] = slices) -> float:
            return statistics.fmean(x[field] for x in slices)

        print(f"| {system} | {durability} | {clients} | {rate:,.0f} | {rounds} | "
              f"{percentile(lat, 0.5) / 1000:.2f} | {percentile(lat, 0.99) / 1000:.2f} | "
              f"{mean('leader_cpu'):.2f} | {mean('follower_cpu'):.2f} | "
              f"{mean('client_cpu'):.2f} |")
    print()

    metrics_cost(results)
    election = args.tick_ms * args.election_ticks / 1000
    median_fo = statistics.median(failover) if failover else float("nan")
    if failover:
        print(f"Leader failover (revivify, fsync on, kill -9 of the leader's process under 2 "
              f"writers, each a write every 10 ms; time from the kill to the first write "
              f"acknowledged by another server; election timeout {election * 1000:.0f} ms = "
              f"{args.tick_ms} ms x {args.election_ticks} ticks, randomised up to 2x):")
        print("| trials | median | max | min | median / election timeout |")
        print("|---:|---:|---:|---:|---:|")
        print(f"| {len(failover)} | {median_fo * 1000:.0f} ms | {max(failover) * 1000:.0f} ms | "
              f"{min(failover) * 1000:.0f} ms | {median_fo / election:.2f} |")
        print("trials (ms): " + " ".join(f"{t * 1000:.0f}" for t in failover))
        print()

    def per_round(system: str, prefix: str, clients: int = 64) -> list[float]:
        """Writes/s in each round (the best configuration matching `prefix` in that round)."""
        rows = [v for (s, d, c), v in results.items()
                if s == system and d.startswith(prefix) and c == clients]
        return [max(row[r]["rate"] for row in rows) for r in range(len(rows[0]))] if rows else []

    def p50_per_round(system: str, prefix: str, clients: int) -> list[float]:
        rows = [v for (s, d, c), v in results.items()
                if s == system and d.startswith(prefix) and c == clients]
        return [rows[0][r]["p50_ms"] for r in range(len(rows[0]))] if rows else []

    # Issue 34's targets. A goal is met by the median of the per-round ratios, except
    # where it says "every round" (then by the worst round), and the p50 ratio is a
    # ceiling (revivify's p50 / etcd's, lower is better).
    checks = [
        ("revivify / etcd, 64 clients, fsync on (every round)",
         per_round("revivify", "fsync on"), per_round("etcd 3.4", "fsync on"), 1.2, "min"),
        ("revivify / etcd, 1 client, fsync on", per_round("revivify", "fsync on", 1),
         per_round("etcd 3.4", "fsync on", 1), 0.9, "median"),
        ("p50 latency revivify / etcd, 1 client, fsync on",
         p50_per_round("revivify", "fsync on", 1), p50_per_round("etcd 3.4", "fsync on", 1),
         1.2, "ceiling"),
        ("revivify (no fsync) / PySyncObj (faster config), 64 clients",
         per_round("revivify", "no fsync"), per_round("PySyncObj", "no fsync"), 2.0,
         "median"),
    ]
    print("Targets (ratios measured within a round; the median over rounds, or the worst "
          "round where it says every round):")
    print("| target | ratio | per round | goal | verdict |")
    print("|---|---:|---|---:|---|")
    for label, ours, theirs, goal, rule in checks:
        sign = "<=" if rule == "ceiling" else ">="
        if not ours or not theirs:
            print(f"| {label} | n/a | (not measured) | {sign} {goal:.1f} | n/a |")
            continue
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        r = min(ratios) if rule == "min" else statistics.median(ratios)
        ok = r <= goal if rule == "ceiling" else r >= goal
        print(f"| {label} | {r:.2f} | {' '.join(f'{x:.2f}' for x in ratios)} | "
              f"{sign} {goal:.1f} | {verdict(ok)} |")
    if failover:
        r = median_fo / election
        print(f"| failover median / election timeout | {r:.2f} | | <= 2.0 | "
              f"{verdict(r <= 2.0)} |")
    else:
        print("| failover median / election timeout | n/a | (not measured) | <= 2.0 | n/a |")
    if checked:
        print()
        print("Trace check of every revivify cluster (`revivify trace check`, its servers' "
              "traces together):")
        print("| cluster | exit | result |")
        print("|---|---:|---|")
        for tag, status, line in checked:
            print(f"| {tag} | {status} | {line} |")


# =============================================================================== main


def preflight(systems: set[str]) -> None:
    """The peers the chosen phases need are installed (none for revivify alone)."""
    missing = []
    if "etcd" in systems and shutil.which("etcd") is None:
        missing.append("etcd (Debian package etcd-server)")
    if "pysyncobj" in systems and importlib.util.find_spec("pysyncobj") is None:
        missing.append(f"pysyncobj (PyPI, in {sys.prefix})")
    if missing:
        raise BenchError(f"missing: {', '.join(missing)}; {HINT}")
    if "etcd" not in systems:
        return
    version = subprocess.run(["etcd", "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    if "Version: 3.4" not in version:
        print(f"warning: expected etcd 3.4, found: {version.splitlines()[:1]}", file=sys.stderr)


async def run_all(args: argparse.Namespace, procs: Processes, directory: str
                  ) -> tuple[Results, float, list[float]]:
    targets: list[Target] = []
    with trio.fail_after(300):
        if "revivify" in args.systems:
            for fsync in (True, False):
                for metrics in args.metrics_modes:
                    tag = ("rv-sync" if fsync else "rv-nosync") + ("" if metrics else "-nomet")
                    cluster: Any = Revivify(procs, os.path.join(directory, tag), tag, fsync,
                                            args, metrics)
                    await cluster.start()
                    targets.append(Target("revivify" if metrics else NO_METRICS,
                                          "fsync on" if fsync else "no fsync", cluster))
        if "etcd" in args.systems:
            cluster = Etcd(procs, os.path.join(directory, "etcd"))
            await cluster.start()
            targets.append(Target("etcd 3.4", "fsync on", cluster))
        if "pysyncobj" in args.systems:
            for batch in (True, False):
                cluster = PySyncObjCluster(procs, "so-batch" if batch else "so-nobatch", batch)
                await cluster.start()
                targets.append(Target("PySyncObj", "no fsync, " + (
                    "default" if batch else "batch=False"), cluster))
    results: Results = {(t.system, t.durability, c): []
                        for t in targets for c in args.client_counts}
    idle = await idle_cpu(procs) if targets else 0.0
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
        order = targets[r % len(targets):] + targets[:r % len(targets)] if targets else []
        for clients in args.client_counts:
            for target in order:
                with trio.fail_after(args.warmup + args.seconds + 120):
                    results[(*target.key, clients)].append(
                        await measure_slice(procs, args, target, clients))
    for target in targets:
        target.cluster.stop()
    failover: list[float] = []
    if args.failover_trials > 0 and "failover" in args.systems:
        with trio.fail_after(120 + 60 * args.failover_trials):
            failover = await failover_phase(procs, args, directory)
    return results, idle, failover


async def run_until_signal(args: argparse.Namespace, procs: Processes, directory: str
                           ) -> tuple[Results, float, list[float]]:
    """run_all, cancelled by SIGTERM (then the caller's finally kills every child)."""
    outcome: list[tuple[Results, float, list[float]]] = []
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            async def watch() -> None:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            outcome.append(await run_all(args, procs, directory))
            nursery.cancel_scope.cancel()
    if not outcome:
        raise BenchError("stopped by SIGTERM")
    return outcome[0]


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "_loadgen":
        return loadgen_main(sys.argv[2])
    if len(sys.argv) >= 3 and sys.argv[1] == "_syncobj":
        return syncobj_main(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="measured seconds of each point in each round")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds (every point measured once per round)")
    ap.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per point")
    ap.add_argument("--clients", default=",".join(map(str, CLIENT_COUNTS)),
                    help="comma-separated concurrent client counts")
    ap.add_argument("--failover-trials", type=int, default=10)
    ap.add_argument("--tick-ms", type=int, default=50)
    ap.add_argument("--election-ticks", type=int, default=10)
    ap.add_argument("--heartbeat-ticks", type=int, default=2)
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 round of 1 s per point, 0.5 s warm-up, 3 failover trials")
    ap.add_argument("--systems", default="revivify,etcd,pysyncobj,failover",
                    help="which phases to run (comma-separated; the ratios need all four)")
    ap.add_argument("--metrics", choices=("on", "off", "both"), default="on",
                    help="revivify's servers with Prometheus metrics (on, the default), "
                         "started with --no-metrics (off), or both side by side with a "
                         "table of what metrics cost")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    ap.add_argument("--dir", default=None,
                    help="parent of the temp dir (default: the current directory, so fsync "
                         "hits the project's disk)")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.warmup, args.rounds, args.failover_trials = 1.0, 0.5, 1, 3
    args.client_counts = [int(c) for c in args.clients.split(",") if c]
    args.systems = set(args.systems.split(","))
    args.metrics_modes = {"on": (True,), "off": (False,), "both": (True, False)}[args.metrics]
    try:
        preflight(args.systems)
    except BenchError as exc:
        print(f"bench/tserver.py: {exc}", file=sys.stderr)
        return 2
    directory = tempfile.mkdtemp(prefix="revivify-bench-tserver-", dir=args.dir or os.getcwd())
    procs = Processes(directory)
    try:
        results, idle, failover = trio.run(run_until_signal, args, procs, directory)
        procs.close()
        checked = check_traces(directory)
    except (BenchError, trio.TooSlowError) as exc:
        print(f"bench/tserver.py: failed: {exc!r}", file=sys.stderr)
        kept = ")" if args.keep else ", removed; --keep keeps them)"
        print(f"(server logs: {directory}{kept}", file=sys.stderr)
        return 1
    finally:
        procs.close()
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    report(args, results, idle, failover, checked)
    return 1 if any(status != 0 for _, status, _ in checked) else 0


if __name__ == "__main__":
    sys.exit(main())
