"""The workload: concurrent clients on a single-key register and a multi-key map, each
operation recorded as a Jepsen-style history for ``revivify history check``.

Two histories (the JSON Lines format of checker/linearizability/formats.py), one per model:

    register.jsonl  --model register   one key, REGISTER_KEY
    map.jsonl       --model kv         MAP_KEYS keys, each a register on its own

Operations: ``read``; ``write`` of a fresh integer (unique per history, so a read names the
write it saw); a delete is a ``write`` of null (the register back to "no value"). The row
API has put and delete but no compare-and-set, so the workload issues no ``cas``.

Outcomes, as the checker reads them: ``ok`` the operation took effect (a read: with the value
it returned); ``fail`` it did not (only for reads, which change nothing, and for a write the
client refused before sending it); ``info`` unknown: a write that raised after it may have
been sent (a timeout, a lost connection, the client giving up, whatever it says) may still
take effect at any later time. After an ``info`` the worker continues as a new process
(Jepsen's rule: a process has one operation open at a time, and the unknown one stays open
for ever).

Every event also carries ``time`` (seconds since the workload began, monotonic): the report
measures latencies and unavailability from it; the checker ignores it.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from revivify.impl.client import InvalidRequest

REGISTER_KEY = "r"


class Rows(Protocol):
    """What the workload needs of a client: TabletClient and TableClient both fit."""

    async def put(self, key: bytes, value: bytes) -> object: ...

    async def delete(self, key: bytes) -> object: ...

    async def get(self, key: bytes) -> bytes | None: ...


@attrs.define
class History:
    """One model's events, in real-time order (appended as they happen, by one trio thread)."""

    model: str  # "register" or "kv"
    events: list[dict[str, Any]] = attrs.field(factory=list)
    values: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    def record(self, event: dict[str, Any]) -> None:
        if self.model == "register":
            event.pop("key", None)
        self.events.append(event)

    def write_jsonl(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            for event in self.events:
                f.write(json.dumps(event, separators=(",", ":")) + "\n")


def decode_value(raw: bytes | None) -> int | None:
    return None if raw is None else int(raw.decode())


@attrs.define
class Worker:
    """One client process: operations one at a time until told to stop."""

    history: History
    index: int  # process ids of this worker: index, index + stride, ...
    stride: int
    keys: tuple[str, ...]
    rng: random.Random
    op_deadline: float
    clock: Callable[[], float]
    process: int = 0

    def __attrs_post_init__(self) -> None:
        self.process = self.index

    async def run(self, rows: Rows, stop: trio.Event) -> None:
        while not stop.is_set():
            key = self.rng.choice(self.keys)
            roll = self.rng.random()
            if roll < 0.5:
                await self.read(rows, key)
            elif roll < 0.9:
                await self.write(rows, key, next(self.history.values))
            else:
                await self.write(rows, key, None)
            await trio.sleep(self.rng.uniform(0.0, 0.02))

    def _event(self, kind: str, f: str, key: str, value: Any) -> dict[str, Any]:
        return {"process": self.process, "type": kind, "f": f, "key": key, "value": value,
                "time": round(self.clock(), 4)}

    async def read(self, rows: Rows, key: str, *, final: bool = False) -> bool:
        self.history.record(self._event("invoke", "read", key, None))
        outcome, value = await self._call(lambda: rows.get(key.encode()))
        if outcome == "ok":
            assert value is None or isinstance(value, bytes)
            self.history.record(self._event("ok", "read", key, decode_value(value)))
            return True
        event = self._event("fail", "read", key, None)
        if final:
            event["final"] = True
        self.history.record(event)
        return False

    async def write(self, rows: Rows, key: str, value: int | None) -> None:
        self.history.record(self._event("invoke", "write", key, value))
        if value is None:
            outcome, _ = await self._call(lambda: rows.delete(key.encode()))
        else:
            outcome, _ = await self._call(lambda: rows.put(key.encode(), str(value).encode()))
        self.history.record(self._event(outcome, "write", key, value))
        if outcome == "info":
            self.process += self.stride  # the unknown write stays open: a new process

    async def _call(self, op: Callable[[], Awaitable[object]]) -> tuple[str, object]:
        """("ok", result), ("fail", None) for a refusal before sending, ("info", None) for
        anything else (for a read the caller treats "info" as "fail": reads change nothing)."""
        try:
            with trio.fail_after(self.op_deadline):
                return "ok", await op()
        except InvalidRequest:
            return "fail", None
        except (Exception, trio.TooSlowError):
            return "info", None


def ok_latencies(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(invocation time, completion time) of every operation that completed ok."""
    open_: dict[Any, float] = {}
    out: list[tuple[float, float]] = []
    for e in events:
        if e["type"] == "invoke":
            open_[e["process"]] = e["time"]
        elif e["process"] in open_:
            start = open_.pop(e["process"])
            if e["type"] == "ok":
                out.append((start, e["time"]))
    return out


__all__ = ["REGISTER_KEY", "History", "Rows", "Worker", "decode_value", "ok_latencies"]
