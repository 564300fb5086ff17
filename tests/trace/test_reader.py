"""The reader: bad input is data, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from revivify.checker.local import check_paths
from revivify.checker.traces import (
    SCHEMA_VERSION,
    Envelope,
    FileReader,
    InputError,
    parse_line,
)

GOOD = json.dumps({"v": SCHEMA_VERSION, "node": "n1", "inc": 1, "seq": 0, "lamport": 1,
                   "wall_ns": 5, "tablet": None, "event": "server_start", "args": {},
                   "state": None})


def test_good_line() -> None:
    assert isinstance(parse_line(GOOD.encode(), "f", 1, False), Envelope)


def test_torn_last_is_warning_middle_is_error() -> None:
    torn = GOOD[: len(GOOD) // 2].encode()
    last = parse_line(torn, "f", 3, True)
    mid = parse_line(torn, "f", 2, False)
    assert isinstance(last, InputError) and last.kind == "TornLine" and last.warning
    assert isinstance(mid, InputError) and mid.kind == "MalformedLine" and not mid.warning


def test_field_is_named() -> None:
    bad = json.loads(GOOD)
    bad["seq"] = "x"
    e = parse_line(json.dumps(bad).encode(), "f", 4, False)
    assert isinstance(e, InputError) and e.field == "seq" and e.line == 4


def test_version_and_unknown_event() -> None:
    d = json.loads(GOOD)
    e = parse_line(json.dumps(d | {"v": 7}).encode(), "f", 1, False)
    assert isinstance(e, InputError) and e.kind == "UnsupportedSchemaVersion"
    e = parse_line(json.dumps(d | {"event": "nope"}).encode(), "f", 1, False)
    assert isinstance(e, InputError) and e.kind == "UnknownEvent"


def test_bad_args_named(tmp_path: Path) -> None:
    d = json.loads(GOOD)
    lines = [d, d | {"seq": 1, "lamport": 2, "tablet": "t", "event": "learn_term",
                     "args": {"t": "high"}, "state": None}]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    report = check_paths([str(tmp_path)])
    v = next(v for v in report.findings.values() if v.kind == "BadArgs")
    assert v.failed == "args.t" and v.line == 2 and report.exit_code() == 2


def test_empty_file_and_gz(tmp_path: Path) -> None:
    import gzip

    (tmp_path / "e.jsonl").write_text("")
    with gzip.open(tmp_path / "g.jsonl.gz", "wt") as f:
        f.write(GOOD + "\n")
    report = check_paths([str(tmp_path)])
    assert report.kinds() == {"EmptyFile"} and report.exit_code() == 0
    assert report.server_events == 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=60),
                          st.builds(lambda n: GOOD[:n].encode(), st.integers(0, len(GOOD))),
                          st.just(GOOD.encode())), max_size=6))
def test_reader_fuzz_never_raises(lines: list[bytes]) -> None:
    data = b"\n".join(lines)
    for _, item in FileReader("fuzz").lines(data):
        assert isinstance(item, Envelope | InputError)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(["learn_term", "copy_merge_cmeta",
                                                 "stc_reject", "startup"]))
def test_args_and_state_fuzz(blob: bytes, event: str) -> None:
    from revivify.checker.replay import Replayer

    r = Replayer()
    k = r.new_key("n", "t")
    r.feed_raw(k, "f", 1, 1, event, blob, blob)
    r.feed_raw(k, "f", 2, 2, event, blob, b"null")


def test_one_field_list_for_schema_reader_and_writer(tmp_path: Path) -> None:
    """ENVELOPE_FIELDS, traces/schema.json, the reader's Struct and the writer's lines all
    name the same envelope fields in the same order, with matching JSON types."""
    from revivify.checker.traces import ENVELOPE_FIELDS
    from revivify.impl.trace import TraceWriter

    names = [n for n, _ in ENVELOPE_FIELDS]
    schema = json.loads((Path(__file__).resolve().parents[2] / "traces" / "schema.json")
                        .read_text())
    assert schema["required"] == names
    assert list(Envelope.__struct_fields__) == names
    json_type = {"int": "integer", "string": "string", "string?": ["string", "null"],
                 "object": "object"}
    for name, kind in ENVELOPE_FIELDS:
        declared = schema["properties"][name].get("type")
        if declared is not None and kind in json_type:
            assert declared == json_type[kind], name
    with TraceWriter(str(tmp_path), "0" * 32, 1) as w:
        w.event("server_start")
    line = json.loads(next(tmp_path.glob("*.jsonl")).read_text().splitlines()[0])
    assert list(line) == names


def test_version_1_is_refused_by_name() -> None:
    """A version-1 line names the version found and the one supported, in both decoders
    (the typed envelope and the generic fallback for lines it cannot type)."""
    d = json.loads(GOOD)
    for line in (json.dumps(d | {"v": 1}), json.dumps(d | {"v": 1, "seq": "x"})):
        e = parse_line(line.encode(), "f", 1, False)
        assert isinstance(e, InputError) and e.kind == "UnsupportedSchemaVersion"
        assert "schema version 1 is not supported" in e.message
        assert f"reads version {SCHEMA_VERSION}" in e.message and "first_index" in e.message


def test_startup_reason_only_with_failed() -> None:
    """A FAILED startup states a reason; no other case has one (BadArgs otherwise)."""
    from revivify.checker.traces import ArgsError, StartupArgs, decode_args

    ok = decode_args("startup", b'{"case":"FAILED","reason":"WAL segment 3: bad checksum"}')
    assert isinstance(ok, StartupArgs) and ok.reason
    assert isinstance(decode_args("startup", b'{"case":"READY"}'), StartupArgs)
    assert isinstance(decode_args("startup", b'{"case":"READY","reason":null}'), StartupArgs)
    for bad in (b'{"case":"FAILED"}', b'{"case":"FAILED","reason":""}',
                b'{"case":"READY","reason":"why not"}'):
        try:
            decode_args("startup", bad)
        except ArgsError as e:
            assert e.field == "args.reason"
        else:
            raise AssertionError(f"accepted {bad!r}")


def test_schema_json_is_generated() -> None:
    """The committed traces/schema.json is exactly what the contract's Structs
    (``revivify.contract``, the records the writer builds and the reader decodes into)
    generate; regenerate with ``python -m revivify.contract.schema traces/schema.json`` (or
    ``python -m revivify.checker.walks traces``, which rewrites the corpora too)."""
    from revivify.checker import traces
    from revivify.contract import events
    from revivify.contract.schema import contract_schema

    path = Path(__file__).resolve().parents[2] / "traces" / "schema.json"
    assert json.loads(path.read_text()) == contract_schema(), (
        "traces/schema.json is not what the contract generates; if the change to the "
        "contract is meant, regenerate it with `.venv/bin/python -m revivify.contract.schema "
        "traces/schema.json` (or `.venv/bin/python -m revivify.checker.walks traces`, which "
        "rewrites the trace corpora too) and commit both")
    assert contract_schema()["properties"]["v"]["enum"] == [2, 3, 4] and SCHEMA_VERSION == 4
    # The reader decodes into the contract's own types (re-exported, not copies).
    assert traces.Envelope is events.Envelope and traces.ARGS_TYPES is events.ARGS_TYPES
    assert traces.DurableState is events.DurableState


def test_schema_descriptions_do_not_depend_on_the_library() -> None:
    """A Struct's docstring reaches the schema in one form whatever msgspec does with it
    (0.23 dedents continuation lines, 0.22 kept them): indented and dedented input give the
    same description, and the generated schema holds no indented continuation line."""
    from revivify.contract.schema import _own_descriptions, contract_schema

    indented = {"a": {"description": "first line\n    second\n\n    third"}}
    dedented = {"a": {"description": "first line\nsecond\n\nthird"}}
    _own_descriptions(indented)
    _own_descriptions(dedented)
    assert indented == dedented == {"a": {"description": "first line\nsecond\n\nthird"}}
    text = json.dumps(contract_schema())
    assert "\\n    " not in text and "\\n" in text


def test_version_2_is_read_and_other_versions_refused() -> None:
    """Version 4 is written; version-2 and version-3 lines are still read (a version-2
    log_append has no prev_term and terms); anything else is refused by name."""
    d = json.loads(GOOD)
    for v in (2, 3):
        assert isinstance(parse_line(json.dumps(d | {"v": v}).encode(), "f", 1, False),
                          Envelope)
    for bad in (1, 5, "3"):
        e = parse_line(json.dumps(d | {"v": bad}).encode(), "f", 1, False)
        assert isinstance(e, InputError) and e.kind == "UnsupportedSchemaVersion", bad


def test_append_terms_shape() -> None:
    """A version-3 batch: prev_term and terms together, runs covering first..op, the last
    of op_term, terms >= 1 never decreasing from prev_term; anything else is BadArgs."""
    from revivify.checker.traces import AppendArgs, ArgsError, decode_args

    def args(**kw: object) -> bytes:
        return json.dumps({"first_index": 3, "op_term": 2, "op_index": 5} | kw).encode()

    ok = decode_args("log_append", args(prev_term=1, terms=[[1, 1], [2, 2]]))
    assert isinstance(ok, AppendArgs) and ok.terms == [(1, 1), (2, 2)]
    assert isinstance(decode_args("log_append", args()), AppendArgs)  # version 2
    for bad, field in ((args(prev_term=1), "args.terms"),
                       (args(terms=[[2, 3]]), "args.prev_term"),
                       (args(prev_term=1, terms=[[2, 2]]), "args.terms"),
                       (args(prev_term=1, terms=[[1, 3]]), "args.terms"),
                       (args(prev_term=3, terms=[[2, 3]]), "args.terms[0]"),
                       (args(prev_term=1, terms=[[2, 1], [1, 2]]), "args.terms[1]"),
                       (args(prev_term=1, terms=[[2, 0], [2, 3]]), "args.terms[0]"),
                       (args(prev_term=1, terms=[]), "args.terms"),
                       (args(prev_term=-1, terms=[[2, 3]]), "args.prev_term"),
                       (json.dumps({"first_index": 1, "op_term": 1, "op_index": 1,
                                    "prev_term": 1, "terms": [[1, 1]]}).encode(),
                        "args.prev_term")):
        try:
            decode_args("log_append", bad)
        except ArgsError as e:
            assert e.field == field, (bad, e.field, e.message)
        else:
            raise AssertionError(f"accepted {bad!r}")
