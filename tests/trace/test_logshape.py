"""Shape mode (checker/logshape.py): appends and commits memoised with their log positions
abstracted. The z3 proof that makes it exact has teeth, and the replay with shapes gives
exactly what the replay without them gives, on real server traces and on mutated ones."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from revivify.checker import replay as replay_mod
from revivify.checker.local import LocalChecker, check_paths
from revivify.checker.logshape import (
    digits,
    shift_exact,
    split_append,
    split_commit,
    split_state,
)
from revivify.checker.replay import Replayer
from revivify.checker.report import Report
from revivify.spec.actions import Action
from revivify.spec.logic import all_
from revivify.spec.system import default_spec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A longer in-process cluster run than ``sim_traces`` (the bench's generator,
    bench/checker.py: three tablets, concurrent clients, a crash and restart, a
    step-down): logs long enough that keys spend most of their steps in shape mode."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_checker", ROOT / "bench" / "checker.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    d = tmp_path_factory.mktemp("long") / "traces"
    bench.generate_real(str(d), 400)
    return d


def _report_without_shapes(paths: list[str], monkeypatch: pytest.MonkeyPatch) -> Report:
    with monkeypatch.context() as m:
        m.setattr(replay_mod.Replayer, "_to_shape", lambda *a, **k: None)
        return check_paths(paths)


def _same(a: Report, b: Report) -> None:
    assert a.identities() == b.identities()
    assert a.counts == b.counts
    assert (a.events, a.server_events, a.keys) == (b.events, b.server_events, b.keys)
    assert a.coverage == b.coverage
    assert a.frontiers == b.frontiers


class TestProof:
    """``shift_exact``: z3 decides which actions may be abstracted."""

    def test_append_and_commit_are_exact(self) -> None:
        r = Replayer()
        assert shift_exact(r.actions["log_append"], r.invariants, r.step_props)
        assert shift_exact(r.actions["commit"], r.invariants, r.step_props)

    def test_other_actions_are_not_abstracted(self) -> None:
        r = Replayer()
        assert not shift_exact(r.actions["vote_granted"], r.invariants, r.step_props)

    def test_a_guard_that_compares_an_index_with_a_term_is_refused(self) -> None:
        spec = default_spec()
        commit = next(a for a in spec.actions if a.name == "commit")

        def guard(s: Any, index: Any, op_term: Any) -> Any:
            return all_(commit.guard(s, index=index, op_term=op_term), index < s.term + 100)

        bad: Action = attrs.evolve(commit, guard=guard)
        r = Replayer()
        assert not shift_exact(bad, r.invariants, r.step_props)

    def test_an_effect_that_stores_an_index_elsewhere_is_refused(self) -> None:
        spec = default_spec()
        commit = next(a for a in spec.actions if a.name == "commit")

        def effect(s: Any, index: Any, op_term: Any) -> Any:
            return attrs.evolve(commit.effect(s, index=index, op_term=op_term),
                                sb_last_index=index)

        bad: Action = attrs.evolve(commit, effect=effect)
        r = Replayer()
        assert not shift_exact(bad, r.invariants, r.step_props)


class TestBytes:
    """The writer's canonical layout, and nothing else, is split."""

    def test_digits(self) -> None:
        assert digits(b"0") == 0
        assert digits(b"120") == 120
        for bad in (b"07", b" 7", b"+7", b"7_0", b"7.0", b"", b"-1", b"\xd9\xa3"):
            assert digits(bad) is None, bad

    def test_split_append_and_commit(self) -> None:
        a = b'{"first_index":6,"op_term":1,"op_index":8,"prev_term":1,"terms":[[1,3]]}'
        assert split_append(a) == (6, 8, b'"op_term":1', b'"prev_term":1,"terms":[[1,3]]}')
        assert split_append(a.replace(b":6,", b": 6,")) is None
        assert split_commit(b'{"index":8,"op_term":1}') == (8, b'"op_term":1}')
        assert split_commit(b'{"op_term":1,"index":8}') is None

    def test_split_state(self) -> None:
        st = (b'{"superblock":{"data_state":"READY","last_opid":[0,0],"qdir":false},'
              b'"wal":{"location":"LIVE","last_opid":[1,9]},"blocks":"PRESENT"}')
        cut = split_state(st, 9)
        assert cut is not None and cut[0] + b"9" + cut[1] == st
        assert split_state(st, 8) is None
        assert split_state(st.replace(b'"blocks"', b'"x":{"wal":1},"blocks"'), 9) is None


def _mutate(src: Path, dst: Path, seed: int, n: int) -> None:
    """Copy the traces with ``n`` appends or commits changed where shape mode reads them:
    an index one off in the args or in the reported WAL, a term, non-canonical digits."""
    shutil.copytree(src, dst)
    rng = random.Random(seed)
    files = sorted(dst.glob("*.jsonl"))
    for _ in range(n):
        f = rng.choice(files)
        lines = f.read_text().splitlines()
        spots = [i for i, text in enumerate(lines)
                 if '"event":"log_append"' in text or '"event":"commit"' in text]
        if not spots:
            continue
        i = rng.choice(spots[len(spots) // 3:])  # past the start: keys in shape mode
        try:
            d = json.loads(lines[i])
        except ValueError:  # mutated already, into something that is not JSON
            continue
        roll = rng.randrange(6)
        if roll == 0:
            key = "index" if d["event"] == "commit" else "op_index"
            d["args"][key] += rng.choice([-1, 1])
        elif roll == 1:
            d["state"]["wal"]["last_opid"][1] += rng.choice([-1, 1])
        elif roll == 2:
            d["args"]["op_term"] += 1
        elif roll == 3:
            d["state"]["cmeta"]["term"] -= 1
        text = json.dumps(d, separators=(",", ":"))
        if roll == 4:  # the same value in digits the shape path must not read
            text = text.replace('"last_opid":[', '"last_opid":[ ', 1)
        elif roll == 5:
            key = '"index":' if d["event"] == "commit" else '"first_index":'
            text = text.replace(key, key + "0", 1)  # a leading zero: not JSON
        lines[i] = text
        f.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("which", ["sim", "long"])
def test_real_traces_same_with_and_without_shapes(sim_traces: Path, long_run: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  which: str) -> None:
    d = str(sim_traces if which == "sim" else long_run)
    _same(check_paths([d]), _report_without_shapes([d], monkeypatch))


def test_shapes_are_hit_on_real_traces(long_run: Path) -> None:
    """Most appends and commits of a real run are shape hits: few memo misses."""
    lc = LocalChecker()
    report = lc.run([str(long_run)])
    r = lc.replayer
    steps = sum(n for (event, _), n in report.coverage.items()
                if event in ("log_append", "commit"))
    # 400 writes: at least one append and one commit per write somewhere, however the
    # replicas batch them (a loaded machine batches more: 971 steps seen, 2,000+ idle).
    assert steps > 400
    assert report.findings == {}
    assert r.memo_misses < steps / 5, (r.memo_misses, steps)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_mutated_real_traces_same_with_and_without_shapes(
        long_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        seed: int) -> None:
    out = tmp_path / "mutated"
    _mutate(long_run, out, seed, 12)
    with_shapes = check_paths([str(out)])
    assert with_shapes.findings, "the mutations must be seen"
    _same(with_shapes, _report_without_shapes([str(out)], monkeypatch))
