"""``trace follow`` and ``trace check --state`` give the batch check's verdict.

The follower (checker/follow.py) is fed the corpus as servers would write it: each node's
files one after the other (a new incarnation's file only once the previous one is
complete), the nodes interleaved at random, each file written in pieces cut at random
bytes (so lines are torn and completed later), with polls at random points in between
(the pauses). Its final report must be ``check_paths``' on the finished files, finding for
finding, with the same counts and coverage; what it told while following must be in that
report (or told withdrawn, module docstring of checker/follow.py).
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import pickle
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from revivify.checker.follow import Follower
from revivify.checker.keys import KeyState, Violation
from revivify.checker.local import check_paths
from revivify.checker.replay import DEFAULT_MAX_FRONTIER
from revivify.checker.report import Report
from revivify.checker.resume import StateError, check_resumed, dumps, loads, write_state
from revivify.checker.traces import discover, first_envelope, name_incarnation

from .conftest import TRACES

# The corpus: every bad and legal case, and a spread of the spec walks.
CASES = sorted(str(p) for p in (TRACES / "bad").iterdir() if p.is_dir()) + \
    sorted(str(p) for p in (TRACES / "legal").iterdir() if p.is_dir()) + \
    sorted(str(p) for p in (TRACES / "spec-walks").iterdir() if p.is_dir())[::4]


def streams(case: str) -> list[list[str]]:
    """The writers of a case: per node its files in incarnation order (one process after
    the other), and each file no node can be found for on its own."""
    files, _ = discover([case])
    by_node: dict[str, list[tuple[int, str]]] = {}
    alone: list[list[str]] = []
    for f in files:
        head = first_envelope(f) or name_incarnation(f)
        if head is None:
            alone.append([f])
        else:
            by_node.setdefault(head[0], []).append((head[1], f))
    return [[f for _, f in sorted(v)] for _, v in sorted(by_node.items())] + alone


def same(a: Report, b: Report) -> None:
    assert [v.to_json() for v in b.sorted()] == [v.to_json() for v in a.sorted()]
    assert (b.events, b.keys, b.server_events, b.files, b.coverage, b.frontiers) == \
        (a.events, a.keys, a.server_events, a.files, a.coverage, a.frontiers)


def _pieces(case: str, out: Path, rnd: random.Random) -> list[list[tuple[int, str, bytes]]]:
    """Per writer (``streams``), its writes in order: (clock, destination, bytes), each
    line cut at random bytes into several writes (a torn line, completed later)."""
    writers: list[list[tuple[int, str, bytes]]] = []
    for stream in streams(case):
        ops: list[tuple[int, str, bytes]] = []
        for f in stream:
            dest = str(out / os.path.relpath(f, case))
            lines = Path(f).read_bytes().splitlines(keepends=True) or [b""]
            clock = 0
            for line in lines:
                # A malformed line is written with the clock of the line before it.
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    clock = int(json.loads(line)["lamport"])
                cuts = sorted(rnd.sample(range(1, len(line)), min(max(len(line) - 1, 0),
                                                                  rnd.choice((0, 0, 1, 2)))))
                bounds = [0, *cuts, len(line)]
                ops.extend((clock, dest, line[lo:hi]) for lo, hi in itertools.pairwise(bounds))
        writers.append(ops)
    return writers


def write_live(case: str, out: Path, rnd: random.Random, fol: Follower,
               causal: bool = False) -> None:
    """Write ``case``'s files into ``out`` as servers would, polling ``fol`` at random:
    the writers interleaved at random, or with ``causal`` in the order of their clocks
    (ties at random), as a real cluster writes them (a line is written after every line
    that happened before it, and Lamport clocks order those)."""
    writers = _pieces(case, out, rnd)
    while any(writers):
        live = [w for w in writers if w]
        if causal:
            low = min(w[0][0] for w in live)
            live = [w for w in live if w[0][0] == low]
        _, dest, chunk = rnd.choice(live).pop(0)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "ab") as fh:
            fh.write(chunk)
        for _ in range(rnd.choice((0, 0, 0, 1, 1, 2))):
            fol.poll()


@given(case=st.sampled_from(CASES), rnd=st.randoms(use_true_random=False),
       causal=st.booleans())
def test_followed_corpus_gives_the_batch_verdict(case: str, rnd: random.Random,
                                                 causal: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "traces"
        out.mkdir()
        told: list[Violation] = []
        fol = Follower([str(out)], on_finding=told.append, global_every=0.0,
                       judge_factor=0.0)
        write_live(case, out, rnd, fol, causal)
        fol.poll()
        got = fol.finish()
        want = check_paths([str(out)])
        same(want, got)
        check_told(told, want, strict=causal)


def check_told(told: list[Violation], final: Report, strict: bool) -> None:
    """Every finding told while following is in the final report (by identity, or folded
    into the finding kept at its line), or was told withdrawn at the end; with ``strict``
    (clean traces written in causal order) none is withdrawn."""
    withdrawn = {v.identity() for v in told if v.severity == "withdrawn"}
    assert not (strict and withdrawn), withdrawn
    kept = final.identities()
    at = {(v.file, v.line) for v in final.findings.values()}
    for v in told:
        if v.severity == "withdrawn" or v.identity() in withdrawn:
            continue
        assert v.identity() in kept or (v.file, v.line) in at, v


@pytest.mark.parametrize("case", CASES[:3])
def test_follow_once_is_check(case: str) -> None:
    """No interleaving: one poll over the finished files, then the verdict."""
    fol = Follower([case])
    fol.poll()
    same(check_paths([case]), fol.finish())


def test_sim_run_followed(sim_traces: Path) -> None:
    """A real Raft run (in-process cluster: appends, commits, a crash, a copy) followed in
    random interleavings: the batch verdict each time."""
    for seed in range(3):
        rnd = random.Random(seed)
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "traces"
            out.mkdir()
            told: list[Violation] = []
            fol = Follower([str(out)], on_finding=told.append, global_every=0.0,
                       judge_factor=0.0)
            write_live(str(sim_traces), out, rnd, fol, causal=seed % 2 == 1)
            got = fol.finish()
            want = check_paths([str(out)])
            same(want, got)
            check_told(told, want, strict=seed % 2 == 1)


def test_a_torn_line_is_held_until_completed(tmp_path: Path) -> None:
    """A line without its newline is not replayed while the file may still grow: it is
    neither a TornLine nor an event until it is whole (or the file is over)."""
    src = next(p for p in (TRACES / "legal").iterdir() if p.is_dir())
    f = sorted(src.glob("*.jsonl"))[0]
    lines = f.read_bytes().splitlines(keepends=True)
    dest = tmp_path / f.name
    dest.write_bytes(lines[0] + lines[1][:10])
    fol = Follower([str(tmp_path)])
    fol.poll()
    assert fol.replayer.events + sum(g.replay.stats.server_events
                                     for g in fol.groups.values()) <= 1
    assert "TornLine" not in fol.report.kinds()
    with open(dest, "ab") as fh:
        fh.write(lines[1][10:])
    fol.poll()
    assert "TornLine" not in fol.report.kinds()
    assert fol.replayer.events + sum(g.replay.stats.server_events
                                     for g in fol.groups.values()) == 2


# -- trace check --state -------------------------------------------------------------------


def resumed_check(paths: list[str], state: Path) -> Report:
    """What ``trace check --state`` does: restore (or begin), read, save, judge."""
    fol = check_resumed(paths, str(state), DEFAULT_MAX_FRONTIER)
    data = dumps(fol)
    report = fol.finish()
    write_state(str(state), data)
    return report


@given(case=st.sampled_from(CASES), rnd=st.randoms(use_true_random=False),
       batches=st.integers(2, 5))
def test_batches_resumed_give_the_whole(case: str, rnd: random.Random, batches: int) -> None:
    """The corpus written in pieces (torn lines included) and checked after each of 2 to 5
    batches, each run resuming from the state the last one saved: each run's verdict is
    the batch check's of the files as they are then, and the last one's the whole's."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "traces"
        out.mkdir()
        state = Path(tmp) / "state"
        writers = _pieces(case, out, rnd)
        ops = []
        while any(writers):
            ops.append(rnd.choice([w for w in writers if w]).pop(0))
        cuts = sorted(rnd.sample(range(1, len(ops)), min(batches - 1, len(ops) - 1)))
        for lo, hi in itertools.pairwise([0, *cuts, len(ops)]):
            for _, dest, chunk in ops[lo:hi]:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "ab") as fh:
                    fh.write(chunk)
            same(check_paths([str(out)]), resumed_check([str(out)], state))


def test_sim_run_resumed(sim_traces: Path, tmp_path: Path) -> None:
    """A real Raft run checked in 4 batches gives the verdict of one check."""
    rnd = random.Random(7)
    out = tmp_path / "traces"
    out.mkdir()
    writers = _pieces(str(sim_traces), out, rnd)
    ops = []
    while any(writers):
        ops.append(rnd.choice([w for w in writers if w]).pop(0))
    for lo, hi in itertools.pairwise([0, len(ops) // 5, len(ops) // 2, len(ops) - 3,
                                      len(ops)]):
        for _, dest, chunk in ops[lo:hi]:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "ab") as fh:
                fh.write(chunk)
        report = resumed_check([str(out)], tmp_path / "state")
    same(check_paths([str(out)]), report)
    assert report.events > 100


def test_a_state_of_another_version_or_damaged_is_refused(tmp_path: Path) -> None:
    case = CASES[0]
    state = tmp_path / "state"
    resumed_check([case], state)
    good = state.read_bytes()
    head, _, rest = good.partition(b"\n")
    bad = {
        "another version": head.rsplit(b" ", 1)[0] + b" 0123456789abcdef\n" + rest,
        "truncated": good[:-20],
        "damaged": good[:-5] + bytes(5),
        "not a state": b"hello\n",
    }
    for what, data in bad.items():
        state.write_bytes(data)
        with pytest.raises(StateError) as e:
            check_resumed([case], str(state), DEFAULT_MAX_FRONTIER)
        assert "\n" not in str(e.value), what
    state.write_bytes(good)
    with pytest.raises(StateError, match="max-frontier"):
        check_resumed([case], str(state), DEFAULT_MAX_FRONTIER + 1)


def test_a_file_that_shrank_is_an_error(tmp_path: Path) -> None:
    """A trace file only grows: one rewritten shorter after it was checked cannot be
    followed (the batch check of it would not be the follower's): FileShrank, exit 2."""
    src = next(p for p in (TRACES / "legal").iterdir() if p.is_dir())
    for f in src.glob("*.jsonl"):
        shutil.copy(f, tmp_path / f.name)
    fol = Follower([str(tmp_path)])
    fol.poll()
    victim = sorted(tmp_path.glob("*.jsonl"))[0]
    victim.write_bytes(victim.read_bytes()[:50])
    fol.poll()
    assert "FileShrank" in fol.report.kinds()
    assert fol.finish().exit_code() == 2


def _state(term: int, vote: str | None, last: tuple[int, int]) -> str:
    v = "null" if vote is None else f'"{vote}"'
    return ('{"superblock":{"data_state":"READY","last_opid":[0,0],"qdir":false},'
            f'"cmeta":{{"term":{term},"voted_for":{v},"config_index":0}},'
            f'"wal":{{"location":"LIVE","last_opid":[{last[0]},{last[1]}]}},'
            '"blocks":"PRESENT","quarantine":null}')


def _replicated_log(out: Path, entries: int, start: int = 1) -> None:
    """Three replicas of one tablet (a version-3 trace: create, an election, then
    ``entries`` appends committed everywhere), appended to the files in ``out``."""
    nodes = [f"{i:08x}5f0c3a2b9d7e4c1f8a6b2d4e" for i in range(3)]
    files = {n: out / f"{n}.0001.jsonl" for n in nodes}
    seqs = {n: len(files[n].read_bytes().splitlines()) if files[n].exists() else 0
            for n in nodes}
    lines: dict[str, list[str]] = {n: [] for n in nodes}
    clock = [start * 10]

    def line(n: str, tablet: str | None, event: str, args: str, state: str | None) -> None:
        clock[0] += 1
        lines[n].append(json.dumps({
            "v": 3, "node": n, "inc": 1, "seq": seqs[n] + len(lines[n]), "lamport": clock[0],
            "wall_ns": 1, "tablet": tablet, "event": event, "args": json.loads(args),
            "state": None if state is None else json.loads(state)}) + "\n")

    lead = nodes[0]
    if start == 1:
        voters = json.dumps(nodes)
        for n in nodes:
            line(n, None, "server_format", "{}", None)
            line(n, None, "server_start", "{}", None)
            line(n, "t", "create_tablet", f'{{"config_index":0,"voters":{voters}}}',
                 _state(0, None, (0, 0)))
        line(lead, "t", "start_election", f'{{"me":"{lead}"}}', _state(1, lead, (0, 0)))
        for n in nodes[1:]:
            line(n, "t", "vote_granted", f'{{"candidate":"{lead}","t":1,'
                 '"cand_last_term":0,"cand_last_index":0}', _state(1, lead, (0, 0)))
        line(lead, "t", "become_leader", f'{{"me":"{lead}","t":1}}', _state(1, lead, (0, 0)))
    for i in range(start, start + entries):
        for n in nodes:
            line(n, "t", "log_append", f'{{"first_index":{i},"prev_term":{int(i > 1)},'
                 f'"terms":[[1,1]],"op_term":1,"op_index":{i}}}', _state(1, lead, (1, i)))
        for n in nodes:
            line(n, "t", "commit", f'{{"index":{i},"op_term":1}}', _state(1, lead, (1, i)))
    for n in nodes:
        with open(files[n], "a") as fh:
            fh.writelines(lines[n])


def test_the_saved_state_follows_the_live_state_not_the_history(tmp_path: Path) -> None:
    """What the follower keeps (its saved state, a measure of its memory) does not grow
    with the lines it replayed: 200 entries of one tablet, then 2,000 more."""
    _replicated_log(tmp_path, 200)
    fol = Follower([str(tmp_path)])
    fol.poll()
    small = len(dumps(fol))
    _replicated_log(tmp_path, 2000, start=201)
    fol.poll()
    big = len(dumps(fol))
    report = fol.finish()
    assert report.events > 6 * 2000 and report.exit_code() == 0, report.text()
    assert big < 1.5 * small, (small, big)


def test_gzip_files_are_read_when_over(tmp_path: Path) -> None:
    """A gzip'd trace (an archived incarnation) cannot be read while it is written: it is
    read whole once it is over (a later incarnation, or the end); verdict and resumed
    verdict are the batch check's."""
    import gzip

    case = TRACES / "bad" / "crashed-two-leaders"
    for f in sorted(case.glob("*.jsonl")):
        with gzip.open(tmp_path / (f.name + ".gz"), "wb") as gz:
            gz.write(f.read_bytes())
    fol = Follower([str(tmp_path)])
    fol.poll()
    same(check_paths([str(tmp_path)]), fol.finish())
    state = tmp_path.parent / "gz-state"
    resumed_check([str(tmp_path)], state)
    same(check_paths([str(tmp_path)]), resumed_check([str(tmp_path)], state))


def test_files_found_long_are_read_chunk_by_chunk(sim_traces: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A follower started on files already long (a day of traces) learns each file's node
    from its lines up to its first decodable one and replays the rest chunk by chunk:
    with chunks of 512 bytes no file is ever held whole, and what a new file's reader
    holds is its first line, not a chunk (the memory of the live state, not of the
    history; it once read every new file whole to find its first line, then a 4 MiB
    chunk of each: 120 MB for 30 files), and the verdict is the batch one."""
    from revivify.checker import follow as follow_module

    monkeypatch.setattr(follow_module, "CHUNK", 512)
    most_held = 0
    head = follow_module._head

    def watched(lines: list[bytes]) -> tuple[str, int] | None:
        nonlocal most_held  # what a new file's reader holds while it looks for its node
        most_held = max(most_held, sum(map(len, lines)))
        return head(lines)

    monkeypatch.setattr(follow_module, "_head", watched)
    fol = Follower([str(sim_traces)])
    fol.poll()
    biggest = max(os.path.getsize(p) for p in discover([str(sim_traces)])[0])
    assert biggest > 4 * 512, biggest  # several chunks, or the test shows nothing
    first_lines = [len(Path(p).read_bytes().split(b"\n", 1)[0]) + 1
                   for p in discover([str(sim_traces)])[0]]
    assert 0 < most_held <= max(first_lines) < 512, (most_held, first_lines)
    same(check_paths([str(sim_traces)]), fol.finish())


# -- memory: the live state, not the history -------------------------------------------------


def _many_tablets(out: Path, tablets: int, entries: int) -> None:
    """``tablets`` tablets of 3 replicas on 3 nodes, one after the other (as
    ``_replicated_log`` writes one): each node's file names every tablet once."""
    nodes = [f"{i:08x}5f0c3a2b9d7e4c1f8a6b2d4e" for i in range(3)]
    lines: dict[str, list[str]] = {n: [] for n in nodes}
    clock = [0]

    def line(n: str, tablet: str | None, event: str, args: str, state: str | None) -> None:
        clock[0] += 1
        lines[n].append(json.dumps({
            "v": 3, "node": n, "inc": 1, "seq": len(lines[n]), "lamport": clock[0],
            "wall_ns": 1, "tablet": tablet, "event": event, "args": json.loads(args),
            "state": None if state is None else json.loads(state)}) + "\n")

    lead = nodes[0]
    voters = json.dumps(nodes)
    for n in nodes:
        line(n, None, "server_format", "{}", None)
        line(n, None, "server_start", "{}", None)
    for t in range(tablets):
        tab = f"t{t:05d}"
        for n in nodes:
            line(n, tab, "create_tablet", f'{{"config_index":0,"voters":{voters}}}',
                 _state(0, None, (0, 0)))
        line(lead, tab, "start_election", f'{{"me":"{lead}"}}', _state(1, lead, (0, 0)))
        for n in nodes[1:]:
            line(n, tab, "vote_granted", f'{{"candidate":"{lead}","t":1,'
                 '"cand_last_term":0,"cand_last_index":0}', _state(1, lead, (0, 0)))
        line(lead, tab, "become_leader", f'{{"me":"{lead}","t":1}}', _state(1, lead, (0, 0)))
        for i in range(1, entries + 1):
            for n in nodes:
                line(n, tab, "log_append", f'{{"first_index":{i},"prev_term":{int(i > 1)},'
                     f'"terms":[[1,1]],"op_term":1,"op_index":{i}}}', _state(1, lead, (1, i)))
            for n in nodes:
                line(n, tab, "commit", f'{{"index":{i},"op_term":1}}', _state(1, lead, (1, i)))
    for n in nodes:
        (out / f"{n}.0001.jsonl").write_text("".join(lines[n]))


def _key_objects() -> int:
    gc.collect()
    return sum(isinstance(o, KeyState) for o in gc.get_objects())


def test_idle_keys_are_not_kept_as_objects(tmp_path: Path) -> None:
    """The batch check holds one node's keys at a time; the follower holds every node's
    for as long as it runs. So a key that took no event in its node's last ``PACK_LINES``
    lines is packed (bytes: a compressed pickle), and once a node is idle for two polls
    all of its keys are: 1,200 keys read in one poll leave as objects only those of the
    last lines, then none; the verdict, the provisional judgements and a resumed state
    are the batch check's (the structural bound the bench's peak RSS measures: before,
    every key ever seen stayed an object, its context window and its tables)."""
    from revivify.checker import follow as follow_module

    _many_tablets(tmp_path, 400, 6)
    base = _key_objects()  # any other test's, still alive in this process
    fol = Follower([str(tmp_path)], global_every=0.0, judge_factor=0.0)
    fol.poll()
    # One tablet is at least 2 + 6 * 2 lines of each node's file.
    per_node = follow_module.PACK_LINES // 14 + 2
    assert _key_objects() - base <= 3 * per_node < 1200 // 2
    keys = sum(len(g.replay.keys) + len(g.replay.packed) for g in fol.groups.values())
    assert keys == 1200
    fol.poll()
    fol.poll()
    assert _key_objects() == base
    packed = [len(b) for g in fol.groups.values() for b in g.replay.packed.values()]
    assert len(packed) == keys and sum(packed) / keys < 1000, sum(packed) / keys
    state = dumps(fol)
    same(check_paths([str(tmp_path)]), fol.finish())
    assert _key_objects() == base  # finish drops each node's keys as it ends them
    restored = loads(state, [str(tmp_path)], DEFAULT_MAX_FRONTIER)
    same(check_paths([str(tmp_path)]), restored.finish())


@pytest.mark.parametrize("case", CASES[::3])
def test_a_provisional_judgement_leaves_the_tables_as_they_were(case: str) -> None:
    """The provisional findings are merged into the follower's own tables and taken back
    (``global_checks.Journal``), not judged on a copy: they are the findings of a copy,
    and the tables afterwards equal the tables before."""
    fol = Follower([case])
    fol.poll()
    before = pickle.dumps(fol.globals_)
    copy = pickle.loads(before)
    for grp in fol.groups.values():
        grp.replay.pack_idle(lambda k: False)  # as ``provisional`` does first
    for grp in fol.groups.values():
        for f in fol._pending_facts(grp):
            copy.fact(f)
        run = grp.running()
        if run is not None:
            copy.incs.setdefault(grp.node, {}).setdefault(run[0], (run[1], run[2], False))
    want = sorted(json.dumps(v.to_json(), sort_keys=True) for v in copy.violations())
    with fol.provisional() as (tables, got):
        assert tables is fol.globals_
        assert sorted(json.dumps(v.to_json(), sort_keys=True) for v in got) == want
    assert fol.globals_ == pickle.loads(before)


def _provisional_in_one(fol: Follower) -> tuple[dict[tuple[str, str], Any],
                                                 dict[tuple[str, str], list[str] | None]]:
    """The provisional findings of one judgement of every key's pending facts, and the
    nodes bearing on those not told yet, as JSON and names (comparable)."""
    with fol.provisional() as (tables, got):
        found = {v.identity(): v.to_json() for v in got}
        bearing = {v.identity(): _names(fol._bearing(v, tables)) for v in got
                   if v.identity() not in fol.told}
    return found, bearing


def _names(groups: list[Any] | None) -> list[str] | None:
    return None if groups is None else sorted(g.node for g in groups)


def _judged_in_shards_as_in_one(fol: Follower) -> None:
    """With a shard per tablet (``JUDGE_KEYS`` 1) the provisional findings, and the
    nodes bearing on them, are those of one judgement of every key's pending facts; the
    shards cut the tablets held; the tables after are the tables before."""
    from revivify.checker import follow as follow_module

    want = _provisional_in_one(fol)
    before = pickle.dumps(fol.globals_)
    with mock.patch.object(follow_module, "JUDGE_KEYS", 1):
        shards, held = fol._judge_shards()
        found, bearing = fol._provisional_findings()
    assert sorted(itertools.chain.from_iterable(shards)) == sorted(held)
    assert ({i: v.to_json() for i, v in found.items()},
            {i: _names(g) for i, g in bearing.items()}) == want
    assert fol.globals_ == pickle.loads(before)


@pytest.mark.parametrize("case", CASES)
def test_a_judgement_in_shards_is_one_judgement(case: str) -> None:
    """A provisional judgement merges the pending facts of one shard of tablets at a time
    (``Follower._judge_shards``): on every case of the corpus read whole, its findings
    are one judgement's (``_judged_in_shards_as_in_one``), those of no tablet (a reused
    UUID) and of a tablet no key holds (the masters' catalog) included."""
    fol = Follower([case], global_every=float("inf"))
    fol.poll()
    _judged_in_shards_as_in_one(fol)


@given(case=st.sampled_from(CASES), rnd=st.randoms(use_true_random=False),
       share=st.floats(0.0, 1.0))
def test_a_judgement_in_shards_midway_is_one_judgement(case: str, rnd: random.Random,
                                                       share: float) -> None:
    """The same at any point of the writing (a random share of each writer's writes),
    where the pending facts of running incarnations decide the findings."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "traces"
        out.mkdir()
        fol = Follower([str(out)], global_every=float("inf"))
        for ops in _pieces(case, out, rnd):
            for _, dest, chunk in ops[:round(share * len(ops))]:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with open(dest, "ab") as fh:
                    fh.write(chunk)
        fol.poll()
        _judged_in_shards_as_in_one(fol)


def test_judgement_shards_hold_at_most_judge_keys(tmp_path: Path) -> None:
    """The bound on a judgement's memory: each shard's tablets hold at most
    ``JUDGE_KEYS`` keys (here 7: two tablets of 3 keys), and only one shard's keys are
    unpacked and their facts merged before the tables are taken back; every key once.
    400 tablets judged in 200 shards tell what one judgement does."""
    from revivify.checker import follow as follow_module
    from revivify.checker.global_checks import Journal

    _many_tablets(tmp_path, 400, 2)
    fol = Follower([str(tmp_path)], global_every=float("inf"))
    fol.poll()
    want = _provisional_in_one(fol)
    merged = [0]  # keys unpacked since the tables were last taken back
    per_shard: list[int] = []
    unpacked, undo = follow_module._FollowedNode.unpacked, Journal.undo

    def counted(self: Any, tablet: str, blob: bytes) -> KeyState:
        merged[0] += 1
        return unpacked(self, tablet, blob)

    def taken_back(self: Journal) -> None:
        per_shard.append(merged[0])
        merged[0] = 0
        undo(self)

    with mock.patch.object(follow_module, "JUDGE_KEYS", 7), \
            mock.patch.object(follow_module._FollowedNode, "unpacked", counted), \
            mock.patch.object(Journal, "undo", taken_back):
        shards, held = fol._judge_shards()
        found, bearing = fol._provisional_findings()
    assert len(held) == 400 and sorted(itertools.chain.from_iterable(shards)) == \
        sorted(held)
    assert [len(s) for s in shards] == [2] * 200
    assert per_shard == [6] * 200
    assert ({i: v.to_json() for i, v in found.items()},
            {i: _names(g) for i, g in bearing.items()}) == want


def test_finish_drops_the_memo_tables_before_the_final_facts(tmp_path: Path) -> None:
    """``finish`` replays every line first, then drops the replayer's memo tables, and
    only then ends the keys: every fact ``finish`` merges (the final tables' growth)
    comes with the memo tables empty, so the two are not in memory at once (as they are
    at the batch check's end); and the verdict is the batch check's."""
    _many_tablets(tmp_path, 200, 4)
    fol = Follower([str(tmp_path)])
    fol.poll()
    r = fol.replayer
    assert r.memo, "the replay memoised steps"
    sizes: list[int] = []

    def tap(f: object) -> None:
        sizes.append(len(r.memo) + len(r.shape_appends) + len(r.shape_commits))
        fol.globals_.fact(f)  # type: ignore[arg-type]

    fol.fact_tap = tap
    report = fol.finish()
    assert len(sizes) >= 600 and not any(sizes), sizes[:10]
    same(check_paths([str(tmp_path)]), report)


def _ints(obj: object, out: list[int]) -> None:
    """Every int beyond CPython's cached small ones in ``obj``'s containers, as objects."""
    if type(obj) is int and not -6 < obj < 257:
        out.append(obj)
    elif isinstance(obj, (list, tuple, set)):
        for x in obj:
            _ints(x, out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _ints(k, out)
            _ints(v, out)


def test_a_key_unpacked_holds_each_int_once(tmp_path: Path) -> None:
    """Pickle does not memoise ints, so a key unpacked afresh would hold an int object
    per field that held it (a clock, a line number: its ``appends`` and ``tappends``
    entries alike), and so would the facts it flushes into the global tables; packed by
    reference (``_Packer``), each value is one object per key, as in the key replayed."""
    _many_tablets(tmp_path, 30, 300)
    fol = Follower([str(tmp_path)])
    fol.poll()
    fol.poll()
    fol.poll()
    checked = 0
    for g in fol.groups.values():
        for tablet, blob in g.replay.packed.items():
            k = g.replay.unpacked(tablet, blob)
            ints: list[int] = []
            for a in attrs.fields(KeyState):
                if a.name != "state":  # an id into the replayer's table, not unpacked
                    _ints(getattr(k, a.name), ints)
            assert len({id(i) for i in ints}) == len(set(ints)), tablet
            checked += len(ints) > len(set(ints))  # a value held twice
    assert checked > 0
    same(check_paths([str(tmp_path)]), fol.finish())
