"""Building small histories for the tests: events as the jsonl format spells them."""

from __future__ import annotations

import json
from typing import Any

from revivify.checker.linearizability import (
    CheckResult,
    History,
    check_history,
    pair_events,
    read_events,
)

Line = dict[str, Any]


def inv(process: int, f: str, value: Any = None, key: Any = None) -> Line:
    return _line(process, "invoke", f, value, key)


def ok(process: int, f: str, value: Any = None, key: Any = None) -> Line:
    return _line(process, "ok", f, value, key)


def fail(process: int, f: str, value: Any = None, key: Any = None) -> Line:
    return _line(process, "fail", f, value, key)


def info(process: int, f: str, value: Any = None, key: Any = None) -> Line:
    return _line(process, "info", f, value, key)


def _line(process: int, kind: str, f: str, value: Any, key: Any) -> Line:
    line: Line = {"process": process, "type": kind, "f": f, "value": value}
    if key is not None:
        line["key"] = key
    return line


def jsonl(lines: list[Line]) -> list[str]:
    return [json.dumps(line) + "\n" for line in lines]


def history(lines: list[Line], kv: bool = False) -> History:
    return pair_events("h.jsonl", read_events("h.jsonl", jsonl(lines), "jsonl", keyed=kv))


def check(lines: list[Line], kv: bool = False) -> CheckResult:
    return check_history(history(lines, kv))


def linearizable(lines: list[Line], kv: bool = False) -> bool:
    return check(lines, kv).linearizable
