"""Known-bad traces for issue 20's two checker fixes, written like ``bad_v3.py``: a valid
history (the spec's ``Recorder``, checker/walks.py) with one mutation, to
``traces/bad/<case>/`` with its ``expected.json`` (``kind``, ``exit_code``, and ``at``:
the file and line both engines must reject it at).

* ``term-regression-then-more``: a follower reports term 1 after term 2 and then three
  more events in term 1. One fault, one finding: exactly one ``TermRegression``, at the
  first line of the lower term (``tests/trace/test_issue20.py`` counts them).
* ``copy-begin-wrong-source``: a copy accepted from server 0's StartTabletCopy begins by
  downloading from server 1: ``copy_begin.source`` is not the copy the spec allows (its
  ``stc_accept`` made the caller the source).

Regenerate::

    python tests/trace/bad_issue20.py traces/bad
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from typing import Any

from revivify.checker.walks import Recorder
from revivify.spec.system import default_spec

Line = dict[str, Any]
Case = Callable[[], tuple[Recorder, Line]]

# name -> (build, expected kind, what it shows)
CASES: dict[str, tuple[Case, str, str]] = {}


def case(name: str, kind: str, what: str) -> Callable[[Case], Case]:
    def add(build: Case) -> Case:
        CASES[name] = (build, kind, what)
        return build
    return add


def new(seed: int) -> Recorder:
    return Recorder.new(default_spec(3), seed, created=True)


def append(r: Recorder, i: int, first: int, count: int, term: int, prev: int) -> Line:
    """Server i appends ``count`` entries of ``term`` from ``first`` (version 3)."""
    line = r.step(i, "log_append", first_index=first, op_term=term,
                  op_index=first + count - 1)
    line["args"]["prev_term"] = prev
    line["args"]["terms"] = [[term, count]]
    return line


@case("term-regression-then-more", "TermRegression",
      "a follower in term 2 reports term 1 on its next commit and on the three after it: "
      "one fault, reported once")
def term_regression() -> tuple[Recorder, Line]:
    r = new(211)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, 4, 1, 0)
    append(r, 1, 1, 4, 1, 0)
    r.step(0, "commit", index=4, op_term=1)
    r.step(1, "learn_term", t=2)
    # A follower's commits (the spec's system guard lets only a leader commit).
    lowered = [r.step(1, "commit", check=False, index=i, op_term=1) for i in range(1, 5)]
    for line in lowered:  # the node's cmeta says term 1 again from here on
        line["state"] = copy.deepcopy(line["state"])
        line["state"]["cmeta"]["term"] = 1
    return r.stop_all(), lowered[0]


@case("copy-begin-wrong-source", "ArgMismatch",
      "a copy accepted from server 0's StartTabletCopy downloads from server 1")
def copy_wrong_source() -> tuple[Recorder, Line]:
    r = new(213)
    r.elect(0, 1, 1, (0, 0))
    append(r, 0, 1, 1, 1, 0)
    r.step(2, "learn_term", t=1)
    append(r, 2, 1, 1, 1, 0)
    # Server 2 is deleted (a tombstone), then told to copy by the leader, server 0.
    for name in ("delete_shutdown", "delete_create_qdir", "delete_copy_superblock",
                 "delete_mark_deleted", "delete_copy_cmeta", "delete_move_wal"):
        r.step(2, name, check=False)
    r.step(2, "stc_accept", check=False, caller=0, caller_term=1, expected_state=1,
           has_opid=0, opid_term=0, opid_index=0)
    at = r.step(2, "copy_begin", check=False)
    assert at["args"]["source"] == r.uuid(0), at["args"]
    at["args"]["source"] = r.uuid(1)
    return r, at


def write(root: str) -> list[str]:
    """(Re)write ``root/<case>/`` for every case; return the names."""
    for name, (build, kind, what) in CASES.items():
        r, at = build()
        f = r.files[(at["node"], at["inc"])]
        expected: dict[str, Any] = {
            "kind": kind, "description": what, "exit_code": 1,
            "at": {"file": f"{at['node']}.{at['inc']:04d}.jsonl",
                   "line": next(n for n, line in enumerate(f, 1) if line is at)}}
        r.write_case(root, name, expected)
    return list(CASES)


if __name__ == "__main__":
    print("\n".join(write(sys.argv[1] if len(sys.argv) > 1 else
                          os.path.join("traces", "bad"))))
