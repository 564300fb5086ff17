"""``config_change`` end to end: the tablet server writes it (a real run's changes, each
right before the log_append of its config entry, planned on the committed config), the
checker replays it through the spec's guard, and each of the server's refusals, written
anyway, is GuardFailed naming it (traces/README.md, "config_change")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.local import check_paths
from revivify.checker.walks import Recorder, scenario_batches
from revivify.spec.system import default_spec

CAS = "the CAS: cas_index is the committed config index (else CAS_MISMATCH)"
PENDING = "no config change of its own pending (else CHANGE_PENDING)"
NOT_READY = "the leader has committed an entry of its term (else LEADER_NOT_READY)"
INDEX = "config_index the last index + 1 (where the config entry is appended)"
BELOW = ("no config below this replica's own pending config change (the only config entry "
         "it left uncommitted)")


def test_a_real_run_writes_each_change_before_its_entry(sim_traces: Path) -> None:
    changes = 0
    for f in sorted(sim_traces.glob("*.jsonl")):
        lines = [json.loads(x) for x in f.read_text().splitlines()]
        for n, line in enumerate(lines):
            if line["event"] != "config_change":
                continue
            changes += 1
            a, st = line["args"], line["state"]
            assert a["cas_index"] == st["cmeta"]["config_index"]
            assert a["config_index"] == st["wal"]["last_opid"][1] + 1
            assert a["voters"]
            after = next(x for x in lines[n + 1:] if x["tablet"] == line["tablet"])
            assert after["event"] == "log_append"
            assert after["args"]["first_index"] == a["config_index"]
    assert changes >= 1
    report = check_paths([str(sim_traces)])
    assert report.coverage_summary()["actions"]["config_change"] == changes
    assert not [v for v in report.sorted() if v.severity != "warning"], report.text()


def ready() -> Recorder:
    """Server 0 leads term 1, has committed 1..3 (entries of its term) and the config at
    index 2; server 1 follows with the same."""
    return scenario_batches(61)


def rejected(r: Recorder, tmp_path: Path) -> tuple[Any, ...]:
    r.stop_all().write(str(tmp_path))
    report = check_paths([str(tmp_path)])
    found = [v for v in report.sorted() if v.severity != "warning"]
    assert len(found) == 1, report.text()
    (v,) = found
    return v.kind, v.event, v.failed


def test_a_change_accepted_as_planned_is_clean(tmp_path: Path) -> None:
    r = ready()
    r.step(0, "config_change", cas_index=2, config_index=4)
    r.step(0, "log_append", first_index=4, op_term=1, op_index=4)
    r.step(1, "log_append", first_index=4, op_term=1, op_index=4)
    r.step(0, "commit", index=4, op_term=1)
    r.step(0, "config_commit", config_index=4)
    r.step(0, "config_change", cas_index=4, config_index=5)
    r.stop_all().write(str(tmp_path))
    report = check_paths([str(tmp_path)])
    assert report.findings == {}, report.text()


@pytest.mark.parametrize(("cas", "index", "failed"), [
    (3, 4, CAS),  # a config the leader has not committed (DeleteTablet's <= accepts it)
    (0, 4, CAS),  # a stale one
    (2, 3, INDEX),  # not where the next entry goes
])
def test_a_refused_change_is_named(tmp_path: Path, cas: int, index: int, failed: str) -> None:
    r = ready()
    r.step(0, "config_change", check=False, cas_index=cas, config_index=index)
    assert rejected(r, tmp_path) == ("GuardFailed", "config_change", failed)


def test_a_second_change_while_one_is_pending(tmp_path: Path) -> None:
    r = ready()
    r.step(0, "config_change", cas_index=2, config_index=4)
    r.step(0, "log_append", first_index=4, op_term=1, op_index=4)
    r.step(0, "config_change", check=False, cas_index=2, config_index=5)
    assert rejected(r, tmp_path) == ("GuardFailed", "config_change", PENDING)


def test_a_change_before_the_leader_committed_in_its_term(tmp_path: Path) -> None:
    r = Recorder.new(default_spec(3), 63, created=True)
    r.elect(0, 1, 1, (0, 0))
    r.step(0, "log_append", first_index=1, op_term=1, op_index=1)
    r.step(0, "config_change", check=False, cas_index=0, config_index=2)
    assert rejected(r, tmp_path) == ("GuardFailed", "config_change", NOT_READY)


def test_no_config_below_a_pending_change_commits(tmp_path: Path) -> None:
    r = Recorder.new(default_spec(3), 65, created=True)
    r.elect(0, 1, 1, (0, 0))
    for i in (0, 1):
        r.step(i, "log_append", first_index=1, op_term=1, op_index=2)
    r.step(0, "commit", index=2, op_term=1)
    r.step(0, "config_change", cas_index=0, config_index=3)
    r.step(0, "log_append", first_index=3, op_term=1, op_index=3)
    r.step(0, "config_commit", check=False, config_index=2)
    assert rejected(r, tmp_path) == ("GuardFailed", "config_commit", BELOW)


def test_the_cas_is_required(tmp_path: Path) -> None:
    r = ready()
    line = r.step(0, "config_change", cas_index=2, config_index=4)
    del line["args"]["cas_index"]
    r.stop_all().write(str(tmp_path))
    report = check_paths([str(tmp_path)])
    assert "BadArgs" in report.kinds() and report.exit_code() == 2, report.text()
