"""The nemesis's view of the cluster: real processes (impl/processes/tservers.py's
ProcessCluster, or masters.py's MasterProcesses for the masters profile), the network their
partitions are made in, the fault file they read, and the few admin calls the nemesis makes
itself, straight over RPC so that nothing it does to heal depends on the client library
under test.

Partitions are made in one of two ways, chosen when the cluster is built (``partitions``):

* ``kernel`` (the default): every server process in a network namespace of its own, a cut
  is nftables DROP rules in the namespaces of the two servers (netns.py). The servers' TCP
  connections see what a real network does to them: packets lost, retransmitted with
  back-off, connections that stay half-dead after the heal until a retransmission lands.
* ``rpc`` (the fallback where the kernel's cannot be made: not root, no ip or nft): cuts in
  the fault file (impl/faultfile.py, the RPC hook impl/rpc/faults.py): both ends drop every
  frame between two server UUIDs, so calls hang and nothing is refused, but every TCP
  connection stays healthy.

Either way a cut names two servers (``ts<i>`` a tablet server, ``m<i>`` a master) and the
workload's clients are in no cut: they reach every server all along. Disk faults are the
fault file's "disk" entries (impl/storage/faults.py). The servers get the fault file's path
through REVIVIFY_FAULT_FILE in their environment; the nemesis rewrites it with a rename.
Every server also runs on the lazy disk (REVIVIFY_LAZY_DISK=1, impl/storage/lazy.py), so a
kill loses what was not fsynced, as a power cut would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Sequence
from typing import Any, TypeVar

import msgspec
import trio

from revivify.impl.client import ClientOptions
from revivify.impl.client.master import master_status
from revivify.impl.consensus.messages import Peer
from revivify.impl.faultfile import ENV
from revivify.impl.processes.control import ServerProcess
from revivify.impl.processes.masters import MasterProcesses
from revivify.impl.processes.tservers import ProcessCluster
from revivify.impl.rpc import RpcError, open_rpc_client
from revivify.impl.rpc.address import parse_address
from revivify.impl.storage import lazy
from revivify.impl.tserver import api

from .netns import KernelNetwork

T = TypeVar("T", bound=msgspec.Struct)

ADMIN_UUID = "nemesis-admin"
CALL_SECONDS = 2.0
PARTITIONS = ("kernel", "rpc")


class Cluster:
    """Tablet servers (and optionally masters) under the nemesis's control. Servers are
    named by index: ``i`` a tablet server, ``master i`` a master (separate methods)."""

    def __init__(self, root: str, *, masters: int, tserver_args: Sequence[str],
                 tservers: int = 3, master_args: Sequence[str] = (),
                 partitions: str = "kernel") -> None:
        assert partitions in PARTITIONS, partitions
        self.root = root
        self.partitions = partitions
        self.fault_path = os.path.join(root, "faults.json")
        self.masters: MasterProcesses | None = None
        # kernel: the namespaces first, since every server binds its namespace's address
        # and every tablet server is given the masters' addresses when it is made.
        self.network = (KernelNetwork([f"m{i}" for i in range(masters)]
                                      + [f"ts{i}" for i in range(tservers)])
                        if partitions == "kernel" else None)
        net = self.network
        try:
            if masters:
                self.masters = MasterProcesses(
                    root, masters=masters, tservers=tservers, tserver_args=tserver_args,
                    master_args=master_args,
                    master_placements=[net.placement(f"m{i}") for i in range(masters)]
                    if net else (),
                    tserver_placements=[net.placement(f"ts{i}") for i in range(tservers)]
                    if net else ())
                self.tservers = self.masters.tservers
            else:
                self.tservers = ProcessCluster(
                    root, tservers, args=list(tserver_args),
                    placements=[net.placement(f"ts{i}") for i in range(tservers)]
                    if net else ())
        except BaseException:
            if net is not None:
                net.close()
            raise
        self.trace_dir = self.tservers.trace_dir
        self.cuts: list[tuple[str, str]] = []  # node names: ts<i>, m<i>
        self.disk: list[dict[str, str]] = []
        # Clock faults by pid (impl/faultfile.py FaultClock): [rate, seconds jumped ahead in all]. A
        # process's entry outlives the heal (rate 1 again) so that what it jumped stays:
        # its clock must not go back.
        self.clocks: dict[int, list[float]] = {}
        self.paused: set[int] = set()
        self.paused_masters: set[int] = set()

    # ------------------------------------------------------------------ processes

    @property
    def servers(self) -> list[ServerProcess]:
        return self.tservers.servers

    @property
    def master_uuids(self) -> list[str]:
        return [m.uuid for m in self.masters.masters] if self.masters else []

    def start_all(self) -> None:
        self.write_faults()
        with _environment(ENV, self.fault_path), _environment(lazy.ENV, "1"):
            if self.masters is not None:
                self.masters.start_all()
            else:
                self.tservers.start_all()

    def start(self, i: int) -> None:
        with _environment(ENV, self.fault_path), _environment(lazy.ENV, "1"):
            self.tservers.start(i)

    def start_tservers(self) -> None:
        """Every stopped tablet server, started together (after a power loss of all)."""
        with _environment(ENV, self.fault_path), _environment(lazy.ENV, "1"):
            stopped = [i for i, s in enumerate(self.servers) if not s.running]
            for i in stopped:
                self.tservers.spawn(i)
            for i in stopped:
                self.tservers.await_started(i)

    def kill(self, i: int) -> None:
        self.tservers.kill(i)
        self.paused.discard(i)

    def kill_all(self) -> None:
        """Every tablet server's power cut at once (SIGKILL on the lazy disk)."""
        for i in range(len(self.servers)):
            self.kill(i)

    # ------------------------------------------------------------------ masters

    def _master_processes(self) -> MasterProcesses:
        assert self.masters is not None, "a profile without masters"
        return self.masters

    def kill_master(self, i: int) -> None:
        self._master_processes().kill_master(i)
        self.paused_masters.discard(i)

    def start_master(self, i: int) -> None:
        with _environment(ENV, self.fault_path), _environment(lazy.ENV, "1"):
            self._master_processes().start_master(i)

    def pause_master(self, i: int) -> None:
        self._signal_process(self._master_processes().masters[i], signal.SIGSTOP)
        self.paused_masters.add(i)

    def resume_master(self, i: int) -> None:
        self._signal_process(self._master_processes().masters[i], signal.SIGCONT)
        self.paused_masters.discard(i)

    def kill_everything(self) -> None:
        """Every master and tablet server killed at once (a power cut of the cluster)."""
        for i in range(len(self.masters.masters) if self.masters else 0):
            self.kill_master(i)
        self.kill_all()

    def start_everything(self) -> None:
        """Every stopped process, started together: masters first, as spawn_all does."""
        for i in list(self.paused_masters):
            self.resume_master(i)
        for i in list(self.paused):
            self.resume(i)
        if self.masters is None:
            self.start_tservers()
            return
        with _environment(ENV, self.fault_path), _environment(lazy.ENV, "1"):
            # Only the stopped ones: a running process printed its "listening" line long ago.
            masters = [i for i, m in enumerate(self.masters.masters) if not m.running]
            tservers = [i for i, s in enumerate(self.servers) if not s.running]
            for i in masters:
                self.masters.spawn_master(i)
            for i in tservers:
                self.tservers.spawn(i)
            for i in masters:
                self.masters.await_master(i)
            for i in tservers:
                self.tservers.await_started(i)

    async def leader_master(self) -> int | None:
        """The index of the ready leader master (None if no master says it is one)."""
        if self.masters is None:
            return None
        found: list[tuple[int, int]] = []

        async def one(i: int) -> None:
            m = self.masters.masters[i] if self.masters else None
            if m is None or not m.running or i in self.paused_masters:
                return
            with contextlib.suppress(Exception), trio.move_on_after(CALL_SECONDS):
                st = await master_status(m.address, ClientOptions(deadline=CALL_SECONDS))
                if st.role == "LEADER" and st.ready:
                    found.append((st.term, i))

        async with trio.open_nursery() as nursery:
            for i in range(len(self.masters.masters)):
                nursery.start_soon(one, i)
        return max(found)[1] if found else None

    def pause(self, i: int) -> None:
        self._signal(i, signal.SIGSTOP)
        self.paused.add(i)

    def resume(self, i: int) -> None:
        self._signal(i, signal.SIGCONT)
        self.paused.discard(i)

    def _signal(self, i: int, signum: int) -> None:
        self._signal_process(self.servers[i], signum)

    @staticmethod
    def _signal_process(s: ServerProcess, signum: int) -> None:
        pid = s.proc.pid if s.proc is not None else s.pid
        if s.running and pid > 0:
            os.killpg(pid, signum)

    def stop_all(self) -> None:
        """A clean stop of everything (SIGTERM; traces end with server_stop)."""
        for i in list(self.paused_masters):
            self.resume_master(i)
        for i in list(self.paused):
            self.resume(i)
        if self.masters is not None:
            self.masters.stop_all()
        else:
            for i in range(len(self.servers)):
                self.tservers.stop(i)

    def close(self) -> None:
        """Kill whatever still runs (SIGKILL reaches a stopped process too), then remove the
        fault file and the network (namespaces, links, cut tables): safe to call at any
        point, more than once. The processes go first: a namespace a process is still in
        outlives its deletion, unnamed, until the process exits."""
        try:
            if self.masters is not None:
                self.masters.close()
            else:
                self.tservers.close()
        finally:
            for path in (self.fault_path, self.fault_path + ".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            if self.network is not None:
                self.network.close()

    # ------------------------------------------------------------------ the fault file

    def write_faults(self) -> None:
        cuts = [] if self.network is not None else [self._uuids(c) for c in self.cuts]
        clocks = [{"pid": pid, "rate": rate, "ahead": ahead}
                  for pid, (rate, ahead) in sorted(self.clocks.items())]
        doc = {"cuts": cuts, "disk": self.disk, "clocks": clocks}
        tmp = self.fault_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, self.fault_path)

    def _uuids(self, pair: tuple[str, str]) -> list[str]:
        """A cut's two node names as the UUIDs the fault file names servers by."""
        out = []
        for name in pair:
            if name.startswith("ts"):
                out.append(self.servers[int(name[2:])].uuid)
            else:
                out.append(self._master_processes().masters[int(name[1:])].uuid)
        return out

    @property
    def node_names(self) -> list[str]:
        """Every server's name in a cut: masters ``m<i>``, tablet servers ``ts<i>``."""
        masters = len(self.masters.masters) if self.masters else 0
        return [f"m{i}" for i in range(masters)] + [f"ts{i}" for i in range(len(self.servers))]

    def set_cuts(self, cuts: Sequence[tuple[str, str]]) -> None:
        """The cut pairs in force become `cuts` (node names): in the kernel (netns.py, each
        pair lifted or made alone) or in the fault file."""
        self.cuts = list(cuts)
        if self.network is not None:
            self.network.set_cuts(self.cuts)
        else:
            self.write_faults()

    def isolate_node(self, name: str) -> None:
        """Cut server `name` from every other server (tablet servers and masters)."""
        self.set_cuts([(name, o) for o in self.node_names if o != name])

    def isolate(self, i: int) -> None:
        """Cut tablet server `i` from every other server (tablet servers and masters)."""
        self.isolate_node(f"ts{i}")

    def isolate_master(self, i: int) -> None:
        """Cut master `i` from every other master and every tablet server."""
        self.isolate_node(f"m{i}")

    def cut_pair(self, i: int, j: int) -> None:
        self.set_cuts([(f"ts{i}", f"ts{j}")])

    def split(self, target: int) -> tuple[list[str], list[str]]:
        """Cut the servers into a minority and a majority, every pair across the line cut
        (Jepsen's halves): the minority is floor(n/2) tablet servers from `target` on and
        floor(m/2) masters from master `target mod m` on; (minority, majority)."""
        n = len(self.servers)
        m = len(self.masters.masters) if self.masters else 0
        minority = [f"ts{(target + k) % n}" for k in range(n // 2)]
        minority += [f"m{(target + k) % m}" for k in range(m // 2)]
        majority = [x for x in self.node_names if x not in minority]
        self.set_cuts([(a, b) for a in minority for b in majority])
        return minority, majority

    def lift_cuts(self) -> None:
        self.set_cuts([])

    def break_disk(self, i: int, subdir: str, op: str, errno: str) -> None:
        prefix = os.path.join(os.path.abspath(self.servers[i].fs_root), subdir)
        self.disk = [{"prefix": prefix, "op": op, "errno": errno}]
        self.write_faults()

    def node_pid(self, name: str) -> int:
        """The process id of server `name` (``ts<i>`` or ``m<i>``), 0 if it is not running."""
        index = int(name[2:] if name.startswith("ts") else name[1:])
        s = (self.servers[index] if name.startswith("ts")
             else self._master_processes().masters[index])
        pid = s.proc.pid if s.proc is not None else s.pid
        return pid if s.running and pid > 0 else 0

    def clock_fault(self, name: str, *, rate: float | None = None,
                    jump: float = 0.0) -> None:
        """Server `name`'s clock runs at `rate` from now (None: as it does) and jumps
        `jump` seconds ahead (impl/faultfile.py FaultClock)."""
        pid = self.node_pid(name)
        if pid:
            entry = self.clocks.setdefault(pid, [1.0, 0.0])
            entry[0] = entry[0] if rate is None else rate
            entry[1] += jump
            self.write_faults()

    def lift_faults(self) -> None:
        self.disk = []
        for entry in self.clocks.values():
            entry[0] = 1.0
        self.set_cuts([])
        self.write_faults()

    # ------------------------------------------------------------------ admin calls

    async def call(self, i: int, method: str, body: msgspec.Struct, response: type[T]) -> T:
        """One admin call to tablet server `i`, bounded by CALL_SECONDS."""
        s = self.servers[i]
        host, port = parse_address(s.address)
        with trio.fail_after(CALL_SECONDS):
            async with open_rpc_client(host, port, s.uuid, ADMIN_UUID,
                                       app_errors=api.APP_ERRORS) as client:
                return await client.call(method, body, response)

    async def replica_state(self, i: int, tablet_id: str) -> tuple[str, str, int]:
        """(state, role, term) of tablet server `i`'s replica; ("DOWN", "", 0) when the
        server does not answer, the state of a replica that is not running."""
        if not self.servers[i].running or i in self.paused:
            return ("DOWN", "", 0)
        try:
            info = await self.call(i, api.ADMIN_CONSENSUS_STATE, api.TabletRef(tablet_id),
                                   api.ReplicaInfo)
        except api.TabletNotRunning as exc:
            return (exc.state, "", 0)
        except api.TabletNotFound:
            return ("ABSENT", "", 0)
        except (RpcError, OSError, trio.TooSlowError):
            return ("DOWN", "", 0)
        return (info.state, info.role, info.term)

    async def caught_up(self, tablet_id: str) -> bool:
        """Every replica RUNNING, one LEADER, and every replica's log reaching the leader's
        commit index: healthy enough that the next single fault leaves a working majority
        (a replica just copied back or restarted is RUNNING before it has caught up)."""
        infos: list[api.ReplicaInfo | None] = [None] * len(self.servers)

        async def one(i: int) -> None:
            if not self.servers[i].running or i in self.paused:
                return
            try:
                infos[i] = await self.call(i, api.ADMIN_CONSENSUS_STATE,
                                           api.TabletRef(tablet_id), api.ReplicaInfo)
            except (api.TabletNotRunning, api.TabletNotFound, RpcError, OSError,
                    trio.TooSlowError):
                return

        async with trio.open_nursery() as nursery:
            for i in range(len(self.servers)):
                nursery.start_soon(one, i)
        if any(x is None or x.state != "RUNNING" for x in infos):
            return False
        leaders = [x for x in infos if x is not None and x.role == "LEADER"]
        if len(leaders) != 1:
            return False
        commit = leaders[0].commit_index
        return all(x is not None and x.last_opid[1] >= commit for x in infos)

    async def states(self, tablet_id: str) -> list[tuple[str, str, int]]:
        out: list[Any] = [None] * len(self.servers)

        async def one(i: int) -> None:
            out[i] = await self.replica_state(i, tablet_id)

        async with trio.open_nursery() as nursery:
            for i in range(len(self.servers)):
                nursery.start_soon(one, i)
        return out

    async def leader(self, tablet_id: str) -> int | None:
        """The index of the server leading in the highest term, if any says LEADER."""
        states = await self.states(tablet_id)
        leaders = [(term, i) for i, (_, role, term) in enumerate(states) if role == "LEADER"]
        return max(leaders)[1] if leaders else None

    async def create_tablet(self, tablet_id: str) -> None:
        """The workload's tablet on all three servers (no masters: Admin.CreateTablet)."""
        peers = [Peer(s.uuid, s.address, "VOTER") for s in self.servers]
        for i in range(len(self.servers)):
            await self.call(i, api.ADMIN_CREATE_TABLET, api.CreateTablet(tablet_id, peers),
                            api.TabletCreated)

    async def tombstone(self, i: int, tablet_id: str) -> None:
        await self.call(i, api.ADMIN_DELETE_TABLET,
                        api.DeleteTablet(tablet_id, "TOMBSTONE", None), api.Ack)


class _environment:
    """Set one environment variable for the processes started inside the block."""

    def __init__(self, name: str, value: str) -> None:
        self.name, self.value = name, value
        self.old: str | None = None

    def __enter__(self) -> None:
        self.old = os.environ.get(self.name)
        os.environ[self.name] = self.value

    def __exit__(self, *exc: object) -> None:
        if self.old is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.old


__all__ = ["Cluster"]
