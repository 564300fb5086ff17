"""The two history formats: Jepsen's log lines and the project's JSON Lines.

jsonl (what revivify's own workloads write), one JSON object per line::

    {"process": 1, "type": "invoke", "f": "write", "value": 3}
    {"process": 1, "type": "ok",     "f": "write", "value": 3}
    {"process": 2, "type": "invoke", "f": "cas",   "value": [3, 4]}
    {"process": 2, "type": "fail",   "f": "cas",   "value": [3, 4]}
    {"process": 0, "type": "invoke", "f": "read",  "value": null}
    {"process": 0, "type": "ok",     "f": "read",  "value": 3}

* ``process``: an integer or a string; a process has at most one operation pending.
* ``type``: ``invoke``; then ``ok`` (took effect), ``fail`` (did not take effect) or ``info``
  (unknown: it may take effect at any time after the invocation, or never). An invocation
  with no completion by the end of the file counts as ``info``.
* ``f``: ``read``, ``write`` or ``cas`` (compare-and-set).
* ``value``: null, an integer or a string. A write's value; a cas's ``[expected, new]``; a
  read's value on its ``ok`` (null on the invocation). An ``ok`` of a write or cas repeats its
  invocation's value; ``fail`` and ``info`` lines may carry anything.
* ``key`` (``--model kv`` only, required there): an integer or a string; each key is a
  register of its own. With ``--model register`` there is one register and no key.
* Lines appear in real-time order (a completion after its invocation). Any other field is
  ignored (a timestamp, a node); blank lines are skipped.

jepsen: the log lines of Jepsen's ``jepsen.util`` logger (tabs or spaces between fields)::

    INFO  jepsen.util - 3	:invoke	:cas	[3 0]
    INFO  jepsen.util - 3	:ok	:cas	[3 0]
    INFO  jepsen.util - 4	:info	:write	:timed-out

Values are EDN: ``nil``, integers, strings and vectors. With ``--model kv`` a value is
Jepsen's ``independent`` tuple ``[key value]`` (``[key [expected new]]`` for cas). Lines of
the ``:nemesis`` process and lines of other loggers (``INFO  jepsen.core - ...``) are skipped.

Anything else is refused with a ``HistoryError`` naming the file, the line and the fault: a
torn line, an unknown operation or event type, a value of the wrong shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Literal, TypeAlias, cast

from revivify.checker.linearizability.history import (
    EVENT_TYPES,
    FUNCTIONS,
    Argument,
    Event,
    EventType,
    Function,
    HistoryError,
    Key,
    Process,
    Value,
)

Format = Literal["jsonl", "jepsen"]
# An error factory that names the line being read.
_Fail: TypeAlias = Callable[[str], HistoryError]
FORMATS: Final[tuple[Format, ...]] = ("jsonl", "jepsen")


def read_events(path: str, lines: Iterable[str], fmt: Format, keyed: bool) -> Iterator[Event]:
    """The events of a history file's lines (numbered from 1). ``keyed``: the kv model."""
    reader = _jsonl_event if fmt == "jsonl" else _jepsen_event
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        event = reader(path, number, line, keyed)
        if event is not None:
            yield event


# ------------------------------------------------------------------------------ jsonl


def _jsonl_event(path: str, number: int, line: str, keyed: bool) -> Event | None:
    def fail(message: str) -> HistoryError:
        return HistoryError(path, number, message)

    try:
        document = json.loads(line)
    except json.JSONDecodeError as e:
        raise fail(f"not a JSON object (torn or malformed line: {e.msg} at column "
                   f"{e.colno})") from None
    if not isinstance(document, dict):
        raise fail("not a JSON object")
    for field in ("process", "type", "f"):
        if field not in document:
            raise fail(f"no {field!r} field")
    process = document["process"]
    if isinstance(process, bool) or not isinstance(process, int | str):
        raise fail(f"process {process!r} is neither an integer nor a string")
    kind = document["type"]
    if kind not in EVENT_TYPES:
        raise fail(f"unknown type {kind!r} (invoke, ok, fail or info)")
    f = document["f"]
    if f not in FUNCTIONS:
        raise fail(f"unknown operation {f!r} (read, write or cas)")
    key: Key = None
    if keyed:
        if "key" not in document:
            raise fail("no 'key' field (the kv model needs one on every line)")
        key = document["key"]
        if isinstance(key, bool) or not isinstance(key, int | str):
            raise fail(f"key {key!r} is neither an integer nor a string")
    elif "key" in document:
        raise fail("a 'key' field, but the register model has one register: use --model kv")
    value = _argument(cast(EventType, kind), cast(Function, f), document.get("value"), fail)
    return Event(line=number, process=process, type=kind, f=f, key=key, value=value)


def _argument(kind: EventType, f: Function, raw: object,
              fail: _Fail) -> Argument:
    """Check a decoded value's shape for its operation; fail and info values are ignored."""
    if kind in ("fail", "info") or (f == "read" and kind == "invoke"):
        return None
    if f == "cas":
        if not (isinstance(raw, list | tuple) and len(raw) == 2):
            raise fail(f"cas value {_show_raw(raw)} is not a pair [expected, new]")
        return (_value(raw[0], fail), _value(raw[1], fail))
    return _value(raw, fail)


def _value(raw: object, fail: _Fail) -> Value:
    if raw is None or isinstance(raw, str) or (isinstance(raw, int)
                                               and not isinstance(raw, bool)):
        return raw
    raise fail(f"value {_show_raw(raw)} is not nil, an integer or a string")


def _show_raw(raw: object) -> str:
    try:
        return json.dumps(raw)
    except (TypeError, ValueError):
        return repr(raw)


# ------------------------------------------------------------------------------ jepsen

# LEVEL  logger - PROCESS  :type  :f  VALUE (the value runs to the end of the line).
_LOG_LINE: Final = re.compile(r"^(?P<level>[A-Z]+)\s+(?P<logger>[\w.$-]+) - (?P<rest>.*)$")
_OP: Final = re.compile(r"^(?P<process>\S+)\s+:(?P<type>\S+)\s+:(?P<f>\S+)(?:\s+(?P<value>.*))?$")


def _jepsen_event(path: str, number: int, line: str, keyed: bool) -> Event | None:
    def fail(message: str) -> HistoryError:
        return HistoryError(path, number, message)

    log = _LOG_LINE.match(line)
    if log is None:
        raise fail(f"not a Jepsen log line (torn or malformed): {_clip(line)}")
    if log["logger"] != "jepsen.util":
        return None  # another logger's message: not an operation
    op = _OP.match(log["rest"].strip())
    if op is None:
        raise fail(f"not an operation 'PROCESS :type :f VALUE' (torn or malformed): "
                   f"{_clip(line)}")
    if op["process"] == ":nemesis":
        return None
    try:
        process: Process = int(op["process"])
    except ValueError:
        raise fail(f"process {op['process']!r} is not an integer") from None
    kind = op["type"]
    if kind not in EVENT_TYPES:
        raise fail(f"unknown type :{kind} (:invoke, :ok, :fail or :info)")
    f = op["f"]
    if f not in FUNCTIONS:
        raise fail(f"unknown operation :{f} (:read, :write or :cas)")
    text = op["value"]
    if text is None:
        raise fail(f"no value after :{f} (torn line?)")
    try:
        raw = _Edn(text).whole()
    except ValueError as e:
        raise fail(f"value {_clip(text)!r} does not parse ({e}; torn line?)") from None
    key: Key = None
    if keyed:
        if not (isinstance(raw, tuple) and len(raw) == 2):
            raise fail(f"value {_clip(text)} is not a [key value] tuple (the kv model reads "
                       "Jepsen's independent keys)")
        raw_key, raw = raw
        if raw_key is None or isinstance(raw_key, tuple):
            raise fail(f"key {_clip(text)} is neither an integer nor a string")
        key = raw_key
    value = _argument(cast(EventType, kind), cast(Function, f), raw, fail)
    return Event(line=number, process=process, type=kind, f=f, key=key, value=value)


_EdnValue: TypeAlias = "int | str | tuple[_EdnValue, ...] | None"


class _Edn:
    """Just enough EDN for Jepsen's values: nil, integers, strings, keywords (kept as
    ``:name`` strings, e.g. ``:timed-out``), vectors and lists (as tuples)."""

    _TOKEN: Final = re.compile(r'\s*(?:(\[|\(|\]|\))|("(?:[^"\\]|\\.)*")|([^\s\[\]()",]+))')

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def whole(self) -> _EdnValue:
        value = self._value()
        if self.text[self.at:].strip():
            raise ValueError(f"unexpected {self.text[self.at:].strip()!r}")
        return value

    def _token(self) -> tuple[str, str]:
        m = self._TOKEN.match(self.text, self.at)
        if m is None:
            rest = self.text[self.at:].strip()
            raise ValueError(f"unexpected {rest[:10]!r}" if rest else "unexpected end")
        self.at = m.end()
        if m[1]:
            return ("bracket", m[1])
        if m[2]:
            return ("string", m[2])
        if m[3]:
            return ("atom", m[3])
        raise ValueError("unexpected end")

    def _value(self) -> _EdnValue:
        kind, text = self._token()
        if kind == "string":
            return cast(str, json.loads(text))
        if kind == "atom":
            if text == "nil":
                return None
            if re.fullmatch(r"[-+]?\d+", text):
                return int(text)
            if text.startswith(":"):
                return text
            raise ValueError(f"unsupported value {text!r}")
        if text in "])":
            raise ValueError(f"unexpected {text!r}")
        close = "]" if text == "[" else ")"
        items: list[_EdnValue] = []
        while True:
            saved = self.at
            kind, token = self._token()
            if kind == "bracket" and token == close:
                return tuple(items)
            self.at = saved
            items.append(self._value())


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
