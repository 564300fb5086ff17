"""Scenario scripts of the lifecycle core, in the style of tests/consensus/testdata (etcd's
datadriven tests): a plain script of commands, each followed by ``----`` and the full
output it must produce, so a reviewer reads what the core does step by step.

Commands (one per block):

    reset KIND [DURABLE]      start over with tablet t1 in a sample state: absent, starting,
                              running, failed, tombstoned, copying (DURABLE: ready,
                              tombstone, copying, nothing, ready-copied)
    register DURABLE          Register (startup found a superblock)
    classify CASE DURABLE     Classified (READY FAILED ROLL_FORWARD TOMBSTONE
                              COPYING_TO_DELETED)
    started DURABLE           ReplicaStarted        start-failed DURABLE  ReplicaStartFailed
    failed                    ReplicaFailed         create / create-failed
    delete MODE [CAS]         Delete                stopped DURABLE       Stopped
    deletion-ended            DeletionEnded (the deletion's steps are durable)
    stc EXPECTED TERM [T.I]   StartCopy from "leader" with source "src"
    step NAME                 a CopyStepDone record (begin merge wal block blocks-done ready)
    ended [REASON]            CopyEnded             vote TERM             VoteRecorded

Output: one line per effect (``persist OP -> event state``, ``trace event args state``,
``STOP_REPLICA``...), then ``refused: ...`` if refused, then ``=> STATE``. A state prints
as ``sb=... last=... cmeta=term/vote/config wal=LOCATION@opid blocks=... q=...``.

Run ``UPDATE_TESTDATA=1 pytest tests/tserver/test_lifecycle_scripts.py`` to rewrite the
expected outputs (then review the diff).
"""

from __future__ import annotations

from typing import Any

import attrs
import msgspec

from revivify.impl.storage.values import ConsensusMeta, RaftConfig
from revivify.impl.tserver.durable import Blocks, Durable, Sb, Wal, running
from revivify.impl.tserver.manager.core import (
    Batch,
    BlockDownloaded,
    BlocksDone,
    Case,
    Classified,
    CmetaMerged,
    CopyBegun,
    CopyEnded,
    Copying,
    CopyStage,
    CopyStepDone,
    Create,
    CreateFailed,
    Delete,
    DeletionEnded,
    Failed,
    LifecycleCore,
    LifecyclePersist,
    LifecycleProtocolError,
    LifecycleTrace,
    MarkedReady,
    Mode,
    Register,
    ReplicaFailed,
    ReplicaStarted,
    ReplicaStartFailed,
    Running,
    Slot,
    StartCopy,
    Starting,
    Stopped,
    Tombstoned,
    Volatile,
    VoteRecorded,
    WalDownloaded,
)

CMETA = ConsensusMeta("t1", 3, "a", RaftConfig(2, ()))
DURABLES: dict[str, Durable] = {
    "ready": running(CMETA, (3, 9), None),
    "ready-empty": running(CMETA, (0, 0), None),
    "ready-damaged": attrs.evolve(running(CMETA, (3, 9), None), wal=Wal.DAMAGED),
    "tombstone": Durable(Sb.DELETED, tombstone_last=(3, 9), sb_qdir=True, cmeta=CMETA,
                         wal=Wal.QUARANTINED, quarantine=(True, True)),
    "tombstone-rollforward": Durable(Sb.DELETED, tombstone_last=(3, 9), sb_qdir=True,
                                     cmeta=CMETA, wal=Wal.LIVE, wal_last=(3, 9),
                                     quarantine=(True, False)),
    "copying": Durable(Sb.COPYING, tombstone_last=(3, 9), cmeta=CMETA, wal=Wal.LIVE,
                       wal_last=(4, 12), blocks=Blocks.PARTIAL, quarantine=(True, True)),
    "nothing": Durable(Sb.DOES_NOT_EXIST),
    "nothing-quarantined": Durable(Sb.DOES_NOT_EXIST, wal=Wal.QUARANTINED,
                                   quarantine=(True, True)),
    "ready-copied": running(attrs.evolve(CMETA, current_term=4), (4, 12), (True, True)),
}


@attrs.frozen
class FakeReplica:
    d: Durable

    def durable(self) -> Durable:
        return self.d


def fmt_durable(d: Durable | None) -> str:
    if d is None:
        return "-"
    cm = d.cmeta
    cmeta = "none" if cm is None else \
        f"{cm.current_term}/{cm.voted_for or '-'}/{cm.committed_config.opid_index or 0}"
    q = "none" if d.quarantine is None else "".join("y" if x else "n" for x in d.quarantine)
    last = f" last={d.tombstone_last[0]}.{d.tombstone_last[1]}" \
        if d.tombstone_last != (0, 0) else ""
    return (f"sb={d.data_state.value}{last}{' qdir' if d.sb_qdir else ''} cmeta={cmeta} "
            f"wal={d.wal.value}@{d.wal_last[0]}.{d.wal_last[1]} blocks={d.blocks.value} q={q}")


def fmt_record(record: Any) -> str:
    """A contract DurableState, printed like ``fmt_durable``."""
    sb, wal, cm = record.superblock, record.wal, record.cmeta
    cmeta = "none" if cm is None else f"{cm.term}/{cm.voted_for or '-'}/{cm.config_index}"
    q = "none" if record.quarantine is None else \
        ("y" if record.quarantine.superblock else "n") + ("y" if record.quarantine.cmeta else "n")
    last = f" last={sb.last_opid[0]}.{sb.last_opid[1]}" if tuple(sb.last_opid) != (0, 0) else ""
    return (f"sb={sb.data_state}{last}{' qdir' if sb.qdir else ''} cmeta={cmeta} "
            f"wal={wal.location}@{wal.last_opid[0]}.{wal.last_opid[1]} "
            f"blocks={record.blocks} q={q}")


def fmt_args(args: msgspec.Struct) -> str:
    items = msgspec.structs.asdict(args)
    parts = []
    for k, v in items.items():
        if v is None or v == "" or v is False:
            continue
        if isinstance(v, msgspec.Struct):
            d = msgspec.structs.asdict(v)
            v = f"{d['term']}/{d['voted_for'] or '-'}/{d['config_index']}"
        parts.append(f"{k}={v}")
    return " ".join(parts)


def fmt_state(core: LifecycleCore) -> str:
    st = core.state("t1")
    extra = ""
    if isinstance(st, Failed):
        extra = f" ({st.reason})"
    elif isinstance(st, Copying):
        extra = f" {st.phase.value}"
    elif hasattr(st, "mode"):
        extra = f" {st.mode.value}"
    return f"=> {st.kind.value}{extra} {fmt_durable(core.durable('t1'))}"


def fmt_batch(batch: Batch) -> list[str]:
    out = []
    for e in batch.effects:
        if isinstance(e, LifecyclePersist):
            args = fmt_args(e.fact.args)
            out.append(f"persist {e.op.value} -> {e.fact.event}{' ' + args if args else ''}: "
                       f"{fmt_record(e.fact.state)}")
        elif isinstance(e, LifecycleTrace):
            args = fmt_args(e.fact.args)
            out.append(f"trace {e.fact.event}{' ' + args if args else ''}: "
                       f"{fmt_record(e.fact.state)}")
        else:
            assert isinstance(e, Volatile)
            out.append(e.name)
    if batch.refusal is not None:
        out.append(f"refused: {type(batch.refusal).__name__}: {batch.refusal}")
    return out


def reset(core: LifecycleCore, kind: str, durable: str | None) -> None:
    core.slots.clear()
    d = DURABLES[durable] if durable else None
    state: Any
    if kind == "absent":
        return
    if kind == "starting":
        state = Starting(attrs.evolve(d or DURABLES["ready"]))
    elif kind == "running":
        state = Running(FakeReplica(d or DURABLES["ready"]))
    elif kind == "failed":
        state = Failed("WAL: bad checksum", d or DURABLES["ready-damaged"], hosted=False)
    elif kind == "tombstoned":
        state = Tombstoned(d or DURABLES["tombstone"])
    elif kind == "copying":
        state = Copying(CopyStage.DOWNLOADING, d or DURABLES["tombstone"], "src")
    else:
        raise ValueError(f"unknown kind {kind!r}")
    core.slots["t1"] = Slot("t1", state)


_MERGED = attrs.evolve(CMETA, current_term=4)
STEPS: dict[str, CopyStepDone] = {
    "begin": CopyBegun(), "merge": CmetaMerged(CMETA, _MERGED, _MERGED),
    "wal": WalDownloaded((4, 12)), "block": BlockDownloaded("b1"), "blocks-done": BlocksDone(),
    "ready": MarkedReady()}


def run_command(core: LifecycleCore, line: str) -> list[str]:
    words = line.split()
    cmd, rest = words[0], words[1:]
    if cmd == "reset":
        reset(core, rest[0], rest[1] if len(rest) > 1 else None)
        return [fmt_state(core)]
    event: Any
    if cmd == "register":
        event = Register(DURABLES[rest[0]])
    elif cmd == "classify":
        event = Classified(Case(rest[0]), DURABLES[rest[1]],
                           " ".join(rest[2:]) if len(rest) > 2 else "")
    elif cmd == "started":
        event = ReplicaStarted(FakeReplica(DURABLES[rest[0]]), DURABLES[rest[0]], ("a", "b"))
    elif cmd == "start-failed":
        event = ReplicaStartFailed("WAL: torn record", DURABLES[rest[0]])
    elif cmd == "failed":
        event = ReplicaFailed("EIO on fsync")
    elif cmd == "create":
        event = Create()
    elif cmd == "create-failed":
        event = CreateFailed("disk full")
    elif cmd == "delete":
        event = Delete(Mode(rest[0]), int(rest[1]) if len(rest) > 1 else None)
    elif cmd == "stopped":
        event = Stopped(DURABLES[rest[0]])
    elif cmd == "deletion-ended":
        event = DeletionEnded()
    elif cmd == "stc":
        opid = tuple(int(x) for x in rest[2].split(".")) if len(rest) > 2 else None
        event = StartCopy("leader", int(rest[1]), "src", Sb(rest[0]), opid,  # type: ignore[arg-type]
                          DURABLES["nothing-quarantined"])
    elif cmd == "step":
        event = STEPS[rest[0]]
    elif cmd == "ended":
        event = CopyEnded(" ".join(rest) or None)
    elif cmd == "vote":
        event = VoteRecorded(attrs.evolve(CMETA, current_term=int(rest[0]), voted_for="b"))
    else:
        raise ValueError(f"unknown command {cmd!r}")
    try:
        batch = core.handle("t1", event)
    except LifecycleProtocolError as exc:
        return [f"protocol error: {exc}", fmt_state(core)]
    return [*fmt_batch(batch), fmt_state(core)]


def run_script(text: str) -> str:
    """Run every block of a script; return the script with the outputs filled in."""
    core = LifecycleCore(max_concurrent_copies=2)
    out: list[str] = []
    blocks = text.split("\n\n")
    for block in blocks:
        lines = block.strip("\n").splitlines()
        if not lines:
            continue
        head = []
        for ln in lines:
            if ln == "----":
                break
            head.append(ln)
        commands = [ln for ln in head if ln and not ln.startswith("#")]
        out.extend(head)
        if commands:
            out.append("----")
            for command in commands:
                out.extend(run_command(core, command))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
