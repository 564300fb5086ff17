"""The interpreter of the data-driven Raft scripts (tests/consensus/testdata/*.txt).

A script is the etcd-io/raft "interaction test" shape: a command line, a ``----`` line, and
the output that command must produce, up to a blank line; comments (``#``) and blank lines
in between. test_scenarios.py runs every script against a fresh RaftCluster and compares
the output verbatim; with ``REVIVIFY_REWRITE=1`` it writes the actual output back into the
file instead, so that a change in behaviour is reviewed as a diff of the scripts.

Commands (nodes are named by their uuids, 1, 2, ...):

    add-nodes N [join] [seed=S] [election=E] [heartbeat=H] [prevote=B] [checkquorum=B]
              [max-append=K] [max-append-bytes=B]
                                     N nodes: the first ones share a bootstrap config
    campaign N                       start an election (pre-vote first, when enabled)
    tick N [count] / tick-all [count]
    propose N DATA
    change-config N add T [non-voter] [promote] cas=K
    change-config N remove|promote|demote T cas=K
    transfer N T / step-down N / read-index N rK
    process-ready [N...]             execute one Ready of each node named (default: all)
    deliver [count=K] [from=X] [to=Y]  deliver the messages in flight (or some of them)
    drop [from=X] [to=Y]             lose the messages in flight that match
    hold [from=X] [to=Y] / release   set messages in flight aside (a slow link), and put
                                     them back in flight, after everything sent meanwhile
    queue                            list the messages in flight
    stabilize [rounds=K]             process and deliver until quiet (at most K rounds)
    rounds K                         K rounds: every node's Ready, then every message
    partition 1 2 / 3 / heal
    crash N [after=K]                crash; after=K: inside its pending Ready, after the
                                     first K effects of its plan (impl/consensus/plan.py)
    restart N [applied=zero]         boot from the durable state (state machine at the
                                     flushed index, or at 0)
    flush N                          the state machine's effects up to applied are durable
    status [N...] / log N...

Typed refusals from the core print as ``error: <Class>: <message>``; any other exception
(an InvariantViolation above all) fails the test.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import attrs

from revivify.impl.consensus.core import Options
from revivify.impl.consensus.errors import ConsensusError
from revivify.impl.consensus.messages import NON_VOTER, VOTER, ChangeKind, MemberType
from revivify.impl.testing.raft import RaftCluster, format_entry, format_message

REWRITE_ENV = "REVIVIFY_REWRITE"


@attrs.define
class Block:
    preamble: list[str]  # comments and blank lines before the command
    command: str
    expected: list[str]
    actual: list[str] = attrs.Factory(list)


def parse(text: str) -> tuple[list[Block], list[str]]:
    """The blocks of a script, and the trailing comment lines after the last one."""
    lines = text.splitlines()
    blocks: list[Block] = []
    pre: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            pre.append(line)
            i += 1
            continue
        command = line
        i += 1
        if i >= len(lines) or lines[i] != "----":
            raise ValueError(f"line {i}: expected ---- after the command {command!r}")
        i += 1
        out: list[str] = []
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        blocks.append(Block(pre, command, out))
        pre = []
    return blocks, pre


def render(blocks: list[Block], trailer: list[str]) -> str:
    out: list[str] = []
    for b in blocks:
        out.extend(b.preamble)
        out.append(b.command)
        out.append("----")
        out.extend(b.actual)
    out.extend(trailer)
    return "\n".join(out).rstrip("\n") + "\n"


def _bool(v: str) -> bool:
    if v not in ("true", "false"):
        raise ValueError(f"not a boolean: {v!r}")
    return v == "true"


class ScriptRunner:
    """Runs script commands against one RaftCluster."""

    def __init__(self, seed: int = 0) -> None:
        self.cluster = RaftCluster(seed=seed)

    def run(self, command: str) -> list[str]:
        words = shlex.split(command)
        name, args = words[0], words[1:]
        pos = [a for a in args if "=" not in a]
        kw = dict(a.split("=", 1) for a in args if "=" in a)
        c = self.cluster
        extra: list[str] = []
        try:
            extra = self._dispatch(name, pos, kw)
        except ConsensusError as exc:
            extra = [f"error: {type(exc).__name__}: {exc}"]
        out = c.take_output() + extra
        for u in c.up():
            assert not c.core(u).anomalies, (u, c.core(u).anomalies)
        c.check()
        return out or ["ok"]

    def _dispatch(self, name: str, pos: list[str], kw: dict[str, str]) -> list[str]:
        c = self.cluster
        if name == "add-nodes":
            if "seed" in kw:
                c.seed = int(kw["seed"])
            opts = Options(
                election_ticks=int(kw.get("election", 10)),
                heartbeat_ticks=int(kw.get("heartbeat", 2)),
                pre_vote=_bool(kw.get("prevote", "true")),
                check_quorum=_bool(kw.get("checkquorum", "true")),
                max_append_entries=int(kw.get("max-append", 256)),
                max_append_bytes=int(kw.get("max-append-bytes", 1 << 20)))
            c.add_nodes(int(pos[0]), join=True if "join" in pos[1:] else None, options=opts)
            return []
        if name == "campaign":
            c.campaign(pos[0])
            return []
        if name == "tick":
            c.tick(pos[0], int(pos[1]) if len(pos) > 1 else 1)
            return []
        if name == "tick-all":
            c.tick_all(int(pos[0]) if pos else 1)
            return []
        if name == "propose":
            e = c.propose(pos[0], pos[1].encode())
            return [f"{pos[0]}: proposed {format_entry(e)}"]
        if name == "change-config":
            return self._change_config(pos, kw)
        if name == "transfer":
            c.transfer(pos[0], pos[1])
            return []
        if name == "step-down":
            c.step_down(pos[0])
            return []
        if name == "read-index":
            c.read_index(pos[0], int(pos[1].lstrip("r")))
            return []
        if name == "process-ready":
            for u in pos or c.up():
                c.process_ready(u)
            return []
        if name == "deliver":
            c.deliver(int(kw["count"]) if "count" in kw else None, src=kw.get("from"),
                      dest=kw.get("to"))
            return []
        if name == "drop":
            if not kw:
                raise ValueError("drop needs from= and/or to=")
            c.drop_matching(src=kw.get("from"), dest=kw.get("to"))
            return []
        if name == "hold":
            c.hold(src=kw.get("from"), dest=kw.get("to"))
            return []
        if name == "release":
            c.release()
            return []
        if name == "queue":
            return [format_message(m) for m in c.queue]
        if name == "stabilize":
            c.stabilize(int(kw["rounds"]) if "rounds" in kw else None)
            return []
        if name == "rounds":
            for _ in range(int(pos[0])):
                c.round()
            return []
        if name == "partition":
            groups: list[list[str]] = [[]]
            for w in pos:
                if w == "/":
                    groups.append([])
                else:
                    groups[-1].append(w)
            c.partition(*groups)
            return []
        if name == "heal":
            c.heal()
            return []
        if name == "crash":
            c.crash(pos[0], after_effects=int(kw["after"]) if "after" in kw else None)
            return []
        if name == "restart":
            c.restart(pos[0], applied="zero" if kw.get("applied") == "zero" else "flushed")
            return []
        if name == "flush":
            c.flush(pos[0])
            return []
        if name == "status":
            return [c.status_line(u) for u in (pos or c.uuids())]
        if name == "log":
            return [c.log_line(u) for u in pos]
        raise ValueError(f"unknown command {name!r}")

    def _change_config(self, pos: list[str], kw: dict[str, str]) -> list[str]:
        leader, verb, target = pos[0], pos[1], pos[2]
        flags = set(pos[3:])
        kind: ChangeKind
        member: MemberType = VOTER
        if verb == "add":
            kind = "ADD"
            member = NON_VOTER if "non-voter" in flags else VOTER
        elif verb == "remove":
            kind = "REMOVE"
        elif verb in ("promote", "demote"):
            kind = "CHANGE_ROLE"
            member = VOTER if verb == "promote" else NON_VOTER
        else:
            raise ValueError(f"unknown change {verb!r}")
        e = self.cluster.change_config(leader, kind, target, cas=int(kw["cas"]),
                                       member_type=member, promote="promote" in flags)
        return [f"{leader}: proposed {format_entry(e)}"]


def run_script(path: Path, seed: int = 0) -> tuple[list[Block], list[str], RaftCluster]:
    """Run every command of the script at ``path``; each block gets its ``actual``."""
    blocks, trailer = parse(path.read_text())
    runner = ScriptRunner(seed)
    for b in blocks:
        b.actual = runner.run(b.command)
    return blocks, trailer, runner.cluster


def rewrite_requested() -> bool:
    return os.environ.get(REWRITE_ENV, "") not in ("", "0")
