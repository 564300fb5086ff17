"""The global facts' columnar form (checker/facts.py) is a projection of the records: every
record comes back from its columns unchanged, and every kind has one merge in
``GlobalChecks``."""

from __future__ import annotations

from typing import Any

import pytest

from revivify.checker.facts import (
    COLUMN_NAMES,
    RECORDS,
    GlobalFact,
    from_columns,
    to_columns,
)
from revivify.checker.global_checks import GlobalChecks

# The fields that hold strings (UUIDs, paths, JSON); "clean" and "copied" hold bools; the
# rest ints.
_STR_FIELDS = frozenset({"tablet", "node", "file", "voters", "candidate", "voter", "leader",
                         "names", "voted_for", "op", "runs", "holds", "key", "digest"})
_BOOL_FIELDS = frozenset({"clean", "copied"})


def _sample(record: type[GlobalFact], seed: int) -> GlobalFact:
    """A record of ``record`` whose every field has a value of its type, varied by
    ``seed`` (no two fields equal, so a swapped column shows)."""
    values: list[Any] = []
    for n, name in enumerate(record.__struct_fields__):
        if name in _BOOL_FIELDS:
            values.append(bool((seed + n) % 2))
        elif name in _STR_FIELDS:
            values.append(f"{name}-{seed}")
        else:
            values.append(seed * 10 + n)
    return record(*values)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.KIND)
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_columns_are_a_projection(record: type[GlobalFact], seed: int) -> None:
    fact = _sample(record, seed)
    columns = to_columns(fact)
    assert len(columns) == len(COLUMN_NAMES)
    assert from_columns(record.KIND, columns) == fact


def test_kinds_are_distinct() -> None:
    kinds = [r.KIND for r in RECORDS]
    assert len(set(kinds)) == len(kinds)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.KIND)
def test_every_kind_merges(record: type[GlobalFact]) -> None:
    g = GlobalChecks()
    g.fact(_sample(record, 1))
    assert g.size() >= 0
