"""The two formats, and unusable input refused with the file, the line and the fault."""

from __future__ import annotations

import pytest

from revivify.checker.linearizability import HistoryError, pair_events, read_events


def parse(text: str, fmt: str = "jsonl", kv: bool = False):  # type: ignore[no-untyped-def]
    lines = text.splitlines(keepends=True)
    return pair_events("h.log", read_events("h.log", lines, fmt, keyed=kv))  # type: ignore[arg-type]


def refused(text: str, fmt: str = "jsonl", kv: bool = False) -> HistoryError:
    with pytest.raises(HistoryError) as caught:
        parse(text, fmt, kv)
    return caught.value


J = "INFO  jepsen.util - "


class TestJepsen:
    def test_tabs_or_spaces(self) -> None:
        h = parse(f"{J}0\t:invoke\t:write\t3\n{J}0   :ok     :write  3\n"
                  f"{J}1\t:invoke\t:cas\t[3 4]\n{J}1\t:ok\t:cas\t[3 4]\n", "jepsen")
        assert [(op.f, op.value) for op in h.operations] == [("write", 3), ("cas", (3, 4))]

    def test_info_and_fail(self) -> None:
        h = parse(f"{J}0\t:invoke\t:write\t3\n{J}0\t:info\t:write\t:timed-out\n"
                  f"{J}5\t:invoke\t:cas\t[1 2]\n{J}5\t:fail\t:cas\t[1 2]\n"
                  f"{J}1\t:invoke\t:read\tnil\n{J}1\t:ok\t:read\tnil\n", "jepsen")
        assert [(op.f, op.open_ended) for op in h.operations] == [("write", True),
                                                                   ("read", False)]
        assert h.failed == 1

    def test_nemesis_and_other_loggers_are_skipped(self) -> None:
        h = parse(f"INFO  jepsen.core - Worker 0 starting\n{J}:nemesis\t:info\t:start\tnil\n"
                  f"{J}0\t:invoke\t:write\t1\n{J}0\t:ok\t:write\t1\n", "jepsen")
        assert len(h.operations) == 1

    def test_independent_keys_for_kv(self) -> None:
        h = parse(f"{J}0\t:invoke\t:cas\t[7 [1 2]]\n{J}0\t:ok\t:cas\t[7 [1 2]]\n"
                  f"{J}1\t:invoke\t:read\t[8 nil]\n{J}1\t:ok\t:read\t[8 \"x\"]\n", "jepsen",
                  kv=True)
        assert [(op.key, op.value) for op in h.operations] == [(7, (1, 2)), (8, "x")]

    @pytest.mark.parametrize("text, line, needle", [
        (f"{J}0\t:invoke\t:write\t3\n{J}0\t:ok\t:wr", 2, "unknown operation :wr"),
        (f"{J}0\t:invoke\t:cas\t[3 4]\n{J}0\t:ok\t:cas\t[3 ", 2, "does not parse"),
        (f"{J}0\t:invoke\t:write\t3\nINFO  jep", 2, "not a Jepsen log line"),
        (f"{J}0\t:invoke\t:delete\t3\n", 1, "unknown operation :delete"),
        (f"{J}0\t:begin\t:write\t3\n", 1, "unknown type :begin"),
        (f"{J}0\t:invoke\t:write\n", 1, "no value after :write"),
        (f"{J}0\t:invoke\n", 1, "not an operation"),
        (f"{J}x\t:invoke\t:write\t1\n", 1, "not an integer"),
        (f"{J}0\t:ok\t:write\t1\n", 1, "without an invocation"),
        (f"{J}0\t:invoke\t:write\t1.5\n", 1, "does not parse"),
        (f"{J}0\t:invoke\t:cas\t3\n", 1, "not a pair"),
    ])
    def test_refused(self, text: str, line: int, needle: str) -> None:
        error = refused(text, "jepsen")
        assert error.line == line and needle in error.message, str(error)
        assert str(error).startswith(f"h.log:{line}: ")

    def test_kv_needs_key_value_tuples(self) -> None:
        assert "[key value]" in refused(f"{J}0\t:invoke\t:write\t3\n", "jepsen", kv=True).message


class TestJsonl:
    @pytest.mark.parametrize("text, line, needle", [
        ('{"process": 0, "type": "invoke", "f": "write", "value": 1}\n{"process": 0, "ty',
         2, "torn or malformed"),
        ('[1, 2]\n', 1, "not a JSON object"),
        ('{"type": "invoke", "f": "read"}\n', 1, "no 'process' field"),
        ('{"process": 0, "type": "invoke", "f": "append", "value": 1}\n', 1,
         "unknown operation 'append'"),
        ('{"process": 0, "type": "done", "f": "read"}\n', 1, "unknown type 'done'"),
        ('{"process": 0, "type": "ok", "f": "read", "value": 1}\n', 1,
         "ok completion of read by process 0 without an invocation"),
        ('{"process": 0, "type": "invoke", "f": "read"}\n'
         '{"process": 0, "type": "invoke", "f": "read"}\n', 2,
         "invokes read while its read invoked at line 1 has not completed"),
        ('{"process": 0, "type": "invoke", "f": "read"}\n'
         '{"process": 0, "type": "ok", "f": "write", "value": 1}\n', 2,
         "completes write but invoked read at line 1"),
        ('{"process": 0, "type": "invoke", "f": "write", "value": 1}\n'
         '{"process": 0, "type": "ok", "f": "write", "value": 2}\n', 2,
         "has value 2 but its invocation at line 1 had 1"),
        ('{"process": 0, "type": "invoke", "f": "write", "value": true}\n', 1,
         "not nil, an integer or a string"),
        ('{"process": 0, "type": "invoke", "f": "write", "value": 1.5}\n', 1,
         "not nil, an integer or a string"),
        ('{"process": 0, "type": "invoke", "f": "cas", "value": [1]}\n', 1, "not a pair"),
        ('{"process": 0, "type": "invoke", "f": "write", "key": "k", "value": 1}\n', 1,
         "use --model kv"),
    ])
    def test_refused(self, text: str, line: int, needle: str) -> None:
        error = refused(text)
        assert error.line == line and needle in error.message, str(error)

    def test_kv_needs_a_key_on_every_line(self) -> None:
        error = refused('{"process": 0, "type": "invoke", "f": "write", "value": 1}\n', kv=True)
        assert "no 'key' field" in error.message

    def test_blank_lines_and_extra_fields(self) -> None:
        h = parse('\n{"process": "c1", "type": "invoke", "f": "write", "value": "v", '
                  '"time": 12}\n\n{"process": "c1", "type": "ok", "f": "write", "value": "v"}\n')
        assert [(op.process, op.value, op.invoke_line, op.complete_line)
                for op in h.operations] == [("c1", "v", 2, 4)]
