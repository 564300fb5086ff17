"""What an operator does during a nemesis run, through the ``revivify`` CLI, one process per
command as a person at a shell runs it: tables created, altered and deleted all along (the
masters under fire while they do DDL), and a client of the map that reads and writes rows
with ``revivify row`` (its operations go into the same history as the library clients').

Outcomes of a command, as the history and the DDL check read them: exit 0 it took effect;
for a read, exit 1 "no such row" is an answer too; anything else (a refusal, no leader, out
of time) is *unknown* for a write or DDL (it may have been applied: the CLI gave up, the
server may not have) and a failed read for a read.

The DDL check (``Ddl.check``, after the run, when the cluster is healthy again): a table
whose create was acknowledged and that was never asked to be deleted must be listed, and a
table whose delete was acknowledged must not be. What was left unknown is not judged.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

KEEP_TABLES = 3  # tables kept alive at once; older ones are deleted (bounded replicas)


def cli(*args: str, timeout: float) -> tuple[int, Any]:
    """``revivify ARGS --json``: (exit code, the parsed document, or the text if none)."""
    cmd = [sys.executable, "-m", "revivify.impl.cli.main", *args, "--json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timeout:g} s"
    try:
        return done.returncode, json.loads(done.stdout)
    except ValueError:
        return done.returncode, (done.stdout + done.stderr).strip()[-2000:]


class CliFailed(Exception):
    """A ``revivify row`` command that did not say it took effect (outcome unknown)."""


@attrs.define
class CliRows:
    """The workload's Rows (workload.py) as ``revivify row`` processes on the table."""

    masters: str
    table: str
    deadline: float

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, masters: str, table: str, deadline: float
                   ) -> AsyncIterator[CliRows]:
        yield cls(masters, table, deadline)

    async def _row(self, *args: str) -> tuple[int, Any]:
        argv = ("row", *args, "--masters", self.masters, "--table", self.table,
                "--deadline", f"{self.deadline:g}")
        return await trio.to_thread.run_sync(
            lambda: cli(*argv, timeout=self.deadline + 30))

    async def put(self, key: bytes, value: bytes) -> object:
        code, doc = await self._row("put", key.decode(), value.decode())
        if code != 0:
            raise CliFailed(f"row put exited {code}: {doc}")
        return doc

    async def delete(self, key: bytes) -> object:
        code, doc = await self._row("delete", key.decode())
        if code != 0:
            raise CliFailed(f"row delete exited {code}: {doc}")
        return doc

    async def get(self, key: bytes) -> bytes | None:
        code, doc = await self._row("get", key.decode())
        if code == 1 and isinstance(doc, dict) and doc.get("value") is None:
            return None  # no such row: an answer
        if code != 0 or not isinstance(doc, dict) or doc.get("value") is None:
            raise CliFailed(f"row get exited {code}: {doc}")
        return str(doc["value"]).encode()


@attrs.define
class Ddl:
    """Tables created, altered and deleted through the CLI during the run; its log."""

    log: list[tuple[str, str, int]] = attrs.field(factory=list)  # (op, table, exit code)
    alive: list[str] = attrs.field(factory=list)  # acknowledged created, not yet deleted

    def counts(self) -> dict[str, int]:
        ok = sum(1 for _, _, code in self.log if code == 0)
        return {"ok": ok, "unknown": len(self.log) - ok}

    async def _do(self, masters: str, *args: str) -> int:
        code, _ = await trio.to_thread.run_sync(
            lambda: cli("table", *args, "--masters", masters, "--deadline", "10",
                        timeout=60))
        self.log.append((args[0], args[1], code))
        return code

    async def run(self, masters: str, stop: trio.Event, rng: random.Random) -> None:
        n = 0
        while not stop.is_set():
            name = f"ddl-{n}"
            n += 1
            if await self._do(masters, "create", name, "--tablets", "1",
                              "--replicas", "3") == 0:
                self.alive.append(name)
                await self._do(masters, "alter", name, "--add-column", "c1:int64")
            while len(self.alive) > KEEP_TABLES:
                await self._do(masters, "delete", self.alive.pop(0))
            await trio.sleep(rng.uniform(0.5, 1.5))

    def check(self, masters: str) -> list[str]:
        """The DDL's problems (module docstring), from ``table list`` now."""
        code, doc = cli("table", "list", "--masters", masters, "--deadline", "30", timeout=90)
        if code != 0 or not isinstance(doc, dict):
            return [f"ddl: table list failed ({code}): {doc}"]
        listed = {t["name"] for t in doc.get("tables", [])}
        asked_delete = {name for op, name, _ in self.log if op == "delete"}
        deleted = {name for op, name, code in self.log if op == "delete" and code == 0}
        created = {name for op, name, code in self.log if op == "create" and code == 0}
        problems = [f"ddl: table {name} was created (acknowledged) and is not listed"
                    for name in sorted(created - asked_delete - listed)]
        problems += [f"ddl: table {name} was deleted (acknowledged) and is still listed"
                     for name in sorted(deleted & listed)]
        return problems


__all__ = ["CliFailed", "CliRows", "Ddl", "cli"]
