"""The core's in-memory view of its Raft log.

The durable log is the WAL (impl/storage/wal.py), written by the shell; this object is what
the core reasons about: entries ``first_index .. last_index`` in memory, plus the OpId just
before the first one (``base``: where the log was compacted after a flush, or (0, 0)).

Invariants (checked by ``check``; tests call it after every step):
* entries are consecutive: entry k has index base.index + 1 + k;
* terms never decrease along the log, and every term is >= base term;
* ``term_at(i)`` is known for base.index <= i <= last_index and None elsewhere.

Truncation is how a follower repairs divergence: ``truncate_after(i)`` drops every entry
above i; the shell learns it because the next append starts at or below the old last index
(the WAL replaces a suffix when an index is written again).
"""

from __future__ import annotations

from collections.abc import Sequence

from .messages import Entry


class RaftLog:
    def __init__(self, entries: Sequence[Entry] = (), base_term: int = 0,
                 base_index: int = 0) -> None:
        self.base_term = base_term
        self.base_index = base_index
        self._entries: list[Entry] = list(entries)
        self.check()

    @property
    def first_index(self) -> int:
        return self.base_index + 1

    @property
    def last_index(self) -> int:
        return self.base_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.base_term

    def term_at(self, index: int) -> int | None:
        if index == self.base_index:
            return self.base_term
        if self.base_index < index <= self.last_index:
            return self._entries[index - self.base_index - 1].term
        return None

    def entry(self, index: int) -> Entry:
        if not self.base_index < index <= self.last_index:
            raise IndexError(f"index {index} not in log ({self.first_index}..{self.last_index})")
        return self._entries[index - self.base_index - 1]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries lo..hi inclusive (clamped to what the log holds)."""
        lo = max(lo, self.first_index)
        hi = min(hi, self.last_index)
        if lo > hi:
            return []
        return self._entries[lo - self.base_index - 1 : hi - self.base_index]

    def first_index_of_term(self, term: int, at_or_below: int) -> int:
        """The first index of the run of ``term`` that contains ``at_or_below``."""
        i = at_or_below
        while i - 1 > self.base_index and self.term_at(i - 1) == term:
            i -= 1
        return i

    def last_index_of_term(self, term: int) -> int | None:
        """The last index holding ``term`` (None if the log has no entry of that term)."""
        for e in reversed(self._entries):
            if e.term == term:
                return e.index
            if e.term < term:
                return None
        return None

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries that continue the log exactly (callers truncate first)."""
        for e in entries:
            if e.index != self.last_index + 1:
                raise ValueError(f"entry index {e.index} does not follow {self.last_index}")
            if e.term < self.last_term:
                raise ValueError(f"entry term {e.term} below last term {self.last_term}")
            self._entries.append(e)

    def truncate_after(self, index: int) -> None:
        if index < self.base_index:
            raise ValueError(f"cannot truncate below the compacted base {self.base_index}")
        del self._entries[index - self.base_index :]

    def compact(self, up_to: int) -> None:
        """Forget entries up to ``up_to`` (they are flushed to blocks); keep its term."""
        up_to = min(up_to, self.last_index)
        if up_to <= self.base_index:
            return
        term = self.term_at(up_to)
        assert term is not None
        del self._entries[: up_to - self.base_index]
        self.base_index, self.base_term = up_to, term

    def matches(self, index: int, term: int) -> bool:
        return self.term_at(index) == term

    def up_to_date(self, last_term: int, last_index: int) -> bool:
        """Raft's election restriction: is (last_term, last_index) at least as recent?"""
        return (last_term, last_index) >= (self.last_term, self.last_index)

    def check(self) -> None:
        expected = self.base_index + 1
        term = self.base_term
        for e in self._entries:
            if e.index != expected:
                raise AssertionError(f"log gap: {e.index} where {expected} was expected")
            if e.term < term:
                raise AssertionError(f"log term decreases at {e.index}: {e.term} < {term}")
            expected += 1
            term = e.term


__all__ = ["RaftLog"]
