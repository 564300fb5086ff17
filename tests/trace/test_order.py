"""Lines out of seq order: one fault, one finding, on every engine.

The reader (``traces.FileOrder``) hands the replay each file's events in seq order: a line
that arrives up to ``REORDER_WINDOW`` lines late is put back in its place and reported
once (``OutOfOrder``), with neither a ``SequenceGap`` nor a replay cascade; a seq that never
comes is still a ``SequenceGap``, a duplicate still ``OutOfOrder``, and the Lamport clock is
judged in seq order. Each case mutates the leader's file of a clean run (create, an
election, then appends and commits), and is checked by the local engine, by the plain
reference driver (``test_driver.reference``: ``FileReader`` and ``Replayer.feed``), and by
both Spark plans.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from revivify.checker.local import check_paths
from revivify.checker.replay import Violation
from revivify.checker.report import Report
from revivify.checker.traces import REORDER_WINDOW, Envelope, FileOrder
from revivify.checker.walks import Recorder
from revivify.spec.system import default_spec

from .test_driver import reference

ENTRIES = 30  # the leader's file: 5 lines, then a log_append and a commit per entry
Lines = list[str]


def write_run(directory: Path, seed: int) -> Path:
    """A clean 3-server run (its own UUIDs and tablet, by ``seed``) written to
    ``directory``; returns the leader's file (65 lines, seqs 0..64 in order)."""
    r = Recorder.new(default_spec(3), seed, created=True, tablet=f"tablet-order-{seed}")
    r.step(0, "start_election", me=0)
    r.step(1, "vote_granted", candidate=0, t=1, cand_last_term=0, cand_last_index=0)
    r.step(0, "become_leader", me=0, t=1)
    for i in range(1, ENTRIES + 1):
        r.step(0, "log_append", first_index=i, op_term=1, op_index=i)
        r.step(1, "log_append", first_index=i, op_term=1, op_index=i)
        r.step(0, "commit", index=i, op_term=1)
        r.step(1, "commit", index=i, op_term=1, check=False)
    leader = Path(r.write(str(directory))[0])
    assert len(leader.read_text().splitlines()) == 5 + 2 * ENTRIES
    return leader


def _set(lines: Lines, n: int, **fields: Any) -> None:
    d = json.loads(lines[n])
    d.update(fields)
    lines[n] = json.dumps(d, separators=(",", ":")) + "\n"


def _get(lines: Lines, n: int, field: str) -> Any:
    return json.loads(lines[n])[field]


def swap(n: int) -> Callable[[Lines], None]:
    def m(lines: Lines) -> None:
        lines[n], lines[n + 1] = lines[n + 1], lines[n]
    return m


def move_later(n: int, by: int) -> Callable[[Lines], None]:
    def m(lines: Lines) -> None:
        lines.insert(n + by, lines.pop(n))
    return m


def shift_seqs(start: int) -> Callable[[Lines], None]:
    """Every seq from line ``start`` (0-based) on one higher: a seq is missing."""
    def m(lines: Lines) -> None:
        for n in range(start, len(lines)):
            _set(lines, n, seq=_get(lines, n, "seq") + 1)
    return m


def duplicate(n: int) -> Callable[[Lines], None]:
    def m(lines: Lines) -> None:
        lines.insert(n + 1, lines[n])
    return m


def delete(n: int) -> Callable[[Lines], None]:
    def m(lines: Lines) -> None:
        del lines[n]
    return m


def swap_keep_clocks(n: int) -> Callable[[Lines], None]:
    """Swap two lines but leave the clocks where they were: in seq order, the clock of the
    second goes down."""
    def m(lines: Lines) -> None:
        a, b = _get(lines, n, "lamport"), _get(lines, n + 1, "lamport")
        swap(n)(lines)
        _set(lines, n, lamport=a)
        _set(lines, n + 1, lamport=b)
    return m


def clock_down(n: int) -> Callable[[Lines], None]:
    def m(lines: Lines) -> None:
        _set(lines, n, lamport=_get(lines, n - 1, "lamport"))
    return m


def tear(n: int) -> Callable[[Lines], None]:
    def m(lines: Lines) -> None:
        lines[n] = lines[n][: len(lines[n]) // 2] + "\n"
    return m


def then(*ms: Callable[[Lines], None]) -> Callable[[Lines], None]:
    def m(lines: Lines) -> None:
        for one in ms:
            one(lines)
    return m


# name -> (seed, mutation of the leader's lines, the findings: (kind, 1-based line, words
# the message holds); ``...`` at the end: the replay may add findings after these).
W = REORDER_WINDOW
CASES: dict[str, tuple[int, Callable[[Lines], None], list[Any]]] = {
    "swap": (401, swap(20), [("OutOfOrder", 22, "seq 20 after seq 21 (line 21)")]),
    "swap-first-two": (402, swap(0), [("OutOfOrder", 2, "seq 0 after seq 1 (line 1)")]),
    "swap-last-two": (403, swap(63), [("OutOfOrder", 65, "seq 63 after seq 64 (line 64)")]),
    "late-by-the-window": (404, move_later(10, W),
                           [("OutOfOrder", 11 + W, f"seq 10 after seq {10 + W}")]),
    "late-beyond-the-window": (405, move_later(10, W + 1), [
        ("SequenceGap", 11, "seq 11 after seq 9: 1 event(s) missing"),
        ("OutOfOrder", 12 + W, f"seq 10 after seq {11 + W}: more than {W} lines late "
                               "(judged missing at line 11)"), ...]),
    "gap": (406, shift_seqs(20), [("SequenceGap", 21, "seq 21 after seq 19")]),
    "gap-at-the-end": (407, shift_seqs(64), [("SequenceGap", 65, "seq 65 after seq 63")]),
    "gap-at-the-start": (408, shift_seqs(0), [("SequenceGap", 1, "first seq is 1, not 0")]),
    "lost-line": (409, delete(20), [("SequenceGap", 21, "seq 21 after seq 19"), ...]),
    "duplicate": (410, duplicate(20), [("OutOfOrder", 22, "seq 20 again (the file is at "
                                                          "seq 20): a duplicate")]),
    "duplicate-of-a-held-line": (411, then(swap(20), duplicate(20)), [
        ("OutOfOrder", 22, "seq 21 again (line 21 has it): a duplicate"),
        ("OutOfOrder", 23, "seq 20 after seq 21 (line 21)")]),
    "clock-down-in-seq-order": (412, swap_keep_clocks(20), [
        ("LamportNotIncreasing", 21, "lamport"),
        ("OutOfOrder", 22, "seq 20 after seq 21 (line 21)")]),
    "clock-down": (413, clock_down(20), [("LamportNotIncreasing", 21, "lamport")]),
    # A torn line (its event lost: a commit) then a swap: the tear explains its seq.
    "swap-after-a-torn-line": (414, then(tear(14), swap(20)), [
        ("MalformedLine", 15, "torn write"), ("OutOfOrder", 22, "seq 20 after seq 21")]),
    # A torn line (seq 20), then seqs 22 and 21 swapped: 21 and 22 wait for 20 until the
    # window is full, then the tear, read before them, explains it: no gap.
    "torn-line-then-a-swap": (415, then(swap(21), tear(20)), [
        ("MalformedLine", 21, "torn write"), ("OutOfOrder", 23, "seq 21 after seq 22")]),
}


def build(root: Path, names: list[str]) -> list[str]:
    """The named cases, each in ``root/<name>/``."""
    paths = []
    for name in names:
        seed, mutate, _ = CASES[name]
        leader = write_run(root / name, seed)
        lines = leader.read_text().splitlines(keepends=True)
        mutate(lines)
        leader.write_text("".join(lines))
        paths.append(str(root / name))
    return paths


def findings(report: Report) -> list[tuple[str, str, int, str, tuple[str, ...], str]]:
    return sorted((v.kind, Path(v.file).name, v.line, v.severity, tuple(v.also), v.message)
                  for v in report.findings.values())


def _holds(found: list[Violation], expected: list[Any]) -> None:
    open_end = bool(expected) and expected[-1] is ...
    want = [e for e in expected if e is not ...]
    got = sorted(found, key=lambda v: (v.line, v.kind))
    head = got[:len(want)]
    assert [(v.kind, v.line) for v in head] == [(k, line) for k, line, _ in want], got
    for v, (_, _, words) in zip(head, want, strict=True):
        assert words in v.message, (v.message, words)
    if not open_end:
        assert len(got) == len(want), got


@pytest.mark.parametrize("name", CASES)
def test_case(tmp_path: Path, name: str) -> None:
    (path,) = build(tmp_path, [name])
    report = check_paths([path])
    _holds([v for v in report.findings.values() if v.severity != "warning"], CASES[name][2])
    assert findings(report) == findings(reference([path]))


def test_one_swap_is_one_finding_and_nothing_else(tmp_path: Path) -> None:
    """The swap of two neighbours: the report is exactly one OutOfOrder, and every event
    is replayed (as many as in the clean run)."""
    clean = write_run(tmp_path / "clean", 401)
    (path,) = build(tmp_path, ["swap"])
    report = check_paths([path])
    assert report.counts["violation"] == 1 and report.exit_code() == 1
    assert report.events == check_paths([str(clean.parent)]).events


def test_without_reordering_a_swap_cascades() -> None:
    """What the reorder buffer buys: fed in file order, a swap is a gap, then an
    OutOfOrder, and the replay would see the events misordered."""
    seqs = [0, 1, 3, 2, 4]
    order = FileOrder("f")
    kinds: list[str] = []
    released: list[int] = []
    for line, s in enumerate(seqs, 1):
        problems, out = order.see(line, _env(s, 10 + s))
        kinds += [p.kind for p in problems]
        released += [e.seq for _, e in out]
    problems, out = order.finish()
    kinds += [p.kind for p in problems]
    released += [e.seq for _, e in out]
    assert kinds == ["OutOfOrder"] and released == sorted(seqs)


def _env(seq: int, lamport: int, node: str = "n", inc: int = 1) -> Envelope:
    import msgspec

    return Envelope(v=3, node=node, inc=inc, seq=seq, lamport=lamport, wall_ns=0,
                    tablet=None, event="server_start", args=msgspec.Raw(b"{}"),
                    state=msgspec.Raw(b"null"))


def test_lines_in_order_go_straight_through() -> None:
    """A file in order: each line is released as it is seen, with no finding."""
    order = FileOrder("f")
    for n in range(1, 50):
        assert order.see(n, _env(n - 1, n)) == ([], [(n, _env(n - 1, n))])
        assert order.fast_state() == (n, n)
    assert order.finish() == ([], [])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-2, 60), max_size=120), st.sets(st.integers(0, 119)))
def test_file_order_releases_every_event_once(seqs: list[int], dropped: set[int]) -> None:
    """Whatever the seqs (gaps, duplicates, negative, far out of order) and the dropped
    lines among them: every event is released exactly once, the order never goes back,
    and never more than ``REORDER_WINDOW`` events are held (the invariants of
    ``FileOrder``)."""
    order = FileOrder("f")
    released: list[tuple[int, Envelope]] = []
    lines = 0
    last = -1
    for s in seqs:
        lines += 1
        while lines in dropped:
            order.dropped += 1
            lines += 1
        _, out = order.see(lines, _env(s, lines))
        released += out
        at = -1 if order.seq is None else order.seq
        assert at >= last
        last = at
        assert len(order.held) <= REORDER_WINDOW
        assert all(h[0] > at + 1 for h in order.held)
        if not order.held:
            assert order.top == at
    _, out = order.finish()
    released += out
    assert not order.held
    assert len(released) == len(seqs) == len({line for line, _ in released})


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.integers(2, REORDER_WINDOW + 1), st.floats(0.05, 1.0))
def test_shuffles_within_the_window(seed: int, block: int, share: float) -> None:
    """Shuffle blocks of up to ``REORDER_WINDOW + 1`` lines of a clean file (no line is
    then more than the window late): the only findings are one ``OutOfOrder`` per line
    that arrives after a higher seq, at that line; the replay sees the clean run."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        leader = write_run(Path(tmp) / "run", 500)
        lines = leader.read_text().splitlines(keepends=True)
        for start in range(0, len(lines), block):
            if rng.random() < share:
                part = lines[start:start + block]
                rng.shuffle(part)
                lines[start:start + block] = part
        leader.write_text("".join(lines))
        seqs = [json.loads(line)["seq"] for line in lines]
        late = {n + 1 for n in range(len(seqs)) if seqs[n] < max(seqs[:n], default=-1)}
        report = check_paths([tmp])
        got = {(v.kind, v.line, v.also) for v in report.findings.values()}
        assert got == {("OutOfOrder", n, ()) for n in late}, report.text()
        assert findings(report) == findings(reference([tmp]))


@pytest.mark.spark
@pytest.mark.parametrize("plan", ["files", "dataframe"])
def test_spark_finds_the_same(spark: Any, tmp_path: Path, plan: str) -> None:
    """Every case, in one job: Spark's findings (kinds, lines, messages, what they fold),
    events, coverage and frontiers are the local engine's."""
    from revivify.checker.spark import validate_spark

    paths = build(tmp_path, list(CASES))
    local = check_paths(paths)
    remote = validate_spark(paths, spark=spark, partitions=4, plan=plan)
    assert findings(remote) == findings(local)
    assert remote.identities() == local.identities()
    assert (remote.events, remote.server_events) == (local.events, local.server_events)
    assert remote.coverage == local.coverage
    assert remote.frontiers == local.frontiers
    assert remote.exit_code() == local.exit_code()
    # Each case's own findings, in the joint run too.
    for name in CASES:
        _holds([v for v in local.findings.values()
                if Path(v.file).parent.name == name and v.severity != "warning"],
               CASES[name][2])
