"""The leader's view of one peer: a Progress, a small state machine (etcd's tracker).

Rules of this file
------------------
* No I/O and no knowledge of the log: the core (core.py) computes where a peer should go
  (fast backtracking, compaction) and calls one of the transitions below; each transition
  asserts that it is a row of ``PROGRESS_TRANSITIONS`` and keeps the invariants listed there.
* Flow control is counted here: ``Inflights`` is a bounded window of the appends sent to
  the peer and not yet acknowledged (at most ``max_count`` of them, and a soft cap on their
  bytes), so a slow or dead peer costs the leader a bounded amount of sending.

The three states (etcd-io/raft tracker/state.go, with a tablet copy for a snapshot)
-------------------------------------------------------------------------------------
    PROBE       where the peer's log ends is not known. One append at a time (``probe_sent``
                pauses the flow until an answer, or the next heartbeat, which probes at the
                same position); a refusal moves ``next`` back, an acknowledgement starts
                REPLICATE. Every peer starts here when a leader is elected.
    REPLICATE   the peer's log is known to match through ``match``. Appends are pipelined:
                ``next`` moves past each batch as it is sent, and each batch takes a slot
                of the window until acknowledged; a full window pauses the flow.
    NEEDS_COPY  only a tablet copy can help: the entries it needs were compacted here
                (``copy_expected`` READY), it answered TOMBSTONED (DELETED), or its server
                does not host the tablet (DOES_NOT_EXIST). No entries are sent; heartbeats
                probe at the end of the log, and the answer after a copy moves it on.

Transitions (``PROGRESS_TRANSITIONS``; the core calls them on the inputs named)
---------------------------------------------------------------------
    PROBE       -> REPLICATE    an OK response (``next`` = match + 1)
    PROBE       -> PROBE        a current refusal (for ``next - 1``): ``next`` moves back
    REPLICATE   -> REPLICATE    an OK response (frees the window up to match)
    REPLICATE   -> PROBE        a current refusal (for an index above ``match``): an append
                                was lost, or the log diverged
    PROBE | REPLICATE -> NEEDS_COPY   entries compacted / TOMBSTONED / tablet not hosted
    NEEDS_COPY  -> NEEDS_COPY   the same again (what the copy should expect is updated)
    NEEDS_COPY  -> REPLICATE    an OK response for a position this log still holds (a
                                copy gave the peer our log)
    NEEDS_COPY  -> PROBE        a refusal whose hint lies in this log (a copy replaced the
                                peer's log; find where it ends)

A refusal names the index it refuses (the request's ``prev_index``). One for an index the
leader has already moved past is stale, a message overtaken by later ones, and is ignored:
in REPLICATE anything at or below ``match`` (the peer has acknowledged past it); in PROBE
anything but ``next - 1`` (probes go out one at a time, so only the latest is current).
Acting on a stale refusal would move ``next`` back again, resending what the peer has.
(TOMBSTONED is judged a little differently: ``tombstoned_is_stale``.)

Invariants (asserted on every transition): 0 <= match < next; the window holds increasing
indexes, all in (match, next); it is empty outside REPLICATE; ``probe_sent`` only in
PROBE; ``copy_expected`` set exactly in NEEDS_COPY.
"""

from __future__ import annotations

import collections
import enum
from typing import Final, Literal

import attrs


class ProgressState(enum.Enum):
    PROBE = "PROBE"
    REPLICATE = "REPLICATE"
    NEEDS_COPY = "NEEDS_COPY"


# What the peer's replica is, as far as the leader knows, while it needs a copy:
# StartTabletCopy names it as the expected state.
CopyExpected = Literal["READY", "DELETED", "DOES_NOT_EXIST"]

_P, _R, _C = ProgressState.PROBE, ProgressState.REPLICATE, ProgressState.NEEDS_COPY
PROGRESS_TRANSITIONS: Final[frozenset[tuple[ProgressState, ProgressState]]] = frozenset({
    (_P, _R), (_P, _P), (_R, _R), (_R, _P), (_P, _C), (_R, _C), (_C, _C), (_C, _R), (_C, _P),
})


@attrs.define
class Inflights:
    """The appends sent to one peer and not yet acknowledged, by the last index each
    carried: a bounded window (etcd's tracker/inflights.go).

    ``max_bytes`` is soft, as in etcd: one append may take the total past it (a single
    entry bigger than the cap must still be sendable); the window is then full.
    """

    max_count: int
    max_bytes: int
    _window: collections.deque[tuple[int, int]] = attrs.field(
        factory=collections.deque, init=False)
    bytes: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        assert self.max_count >= 1 and self.max_bytes >= 1, "a window of at least one"

    def __len__(self) -> int:
        return len(self._window)

    def full(self) -> bool:
        return len(self._window) >= self.max_count or self.bytes >= self.max_bytes

    def add(self, last_index: int, size: int) -> None:
        assert not self.full(), "an append sent into a full window"
        assert not self._window or last_index > self._window[-1][0], \
            "appends enter the window in log order"
        self._window.append((last_index, size))
        self.bytes += size

    def free_le(self, index: int) -> None:
        """The peer acknowledged through ``index``: every append up to it has arrived."""
        while self._window and self._window[0][0] <= index:
            self.bytes -= self._window.popleft()[1]
        assert self.bytes >= 0 and (self._window or self.bytes == 0)

    def reset(self) -> None:
        self._window.clear()
        self.bytes = 0

    def last(self) -> int | None:
        return self._window[-1][0] if self._window else None


@attrs.define
class Progress:
    """The leader's view of one peer (see the module docstring)."""

    inflights: Inflights
    match: int = 0
    next: int = 1
    state: ProgressState = ProgressState.PROBE
    probe_sent: bool = False  # PROBE: an append is out and unanswered (the flow pauses)
    recent_active: bool = False  # heard from within the last election timeout
    copy_expected: CopyExpected | None = None  # NEEDS_COPY only

    def __attrs_post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The invariants every transition keeps."""
        assert 0 <= self.match < self.next, f"match {self.match}, next {self.next}"
        last = self.inflights.last()
        assert last is None or (self.state is _R and self.match < last < self.next), \
            f"window ends at {last} while {self.state.name} match={self.match} next={self.next}"
        assert not self.probe_sent or self.state is _P
        assert (self.copy_expected is not None) == (self.state is _C)

    def _become(self, state: ProgressState) -> None:
        assert (self.state, state) in PROGRESS_TRANSITIONS, \
            f"no progress transition {self.state.name} -> {state.name}"
        self.state = state
        self.probe_sent = False
        self.copy_expected = None
        self.inflights.reset()

    # ---- transitions

    def become_probe(self, next_index: int) -> None:
        """Find where the peer's log ends, from ``next_index`` (never below match + 1)."""
        self._become(_P)
        self.next = max(self.match + 1, next_index)
        self.check()

    def become_replicate(self) -> None:
        """Pipeline from just after the acknowledged match."""
        self._become(_R)
        self.next = self.match + 1
        self.check()

    def become_needs_copy(self, expected: CopyExpected) -> None:
        self._become(_C)
        self.copy_expected = expected
        self.check()

    # ---- flow control

    def is_paused(self) -> bool:
        """No entries may be sent now (heartbeats still go)."""
        if self.state is _P:
            return self.probe_sent
        if self.state is _R:
            return self.inflights.full()
        return True

    def sent_entries(self, last_index: int, size: int) -> None:
        """An append carrying entries ``next .. last_index`` (``size`` bytes) went out."""
        assert not self.is_paused() and last_index >= self.next
        if self.state is _R:
            self.inflights.add(last_index, size)
            self.next = last_index + 1  # optimistic: the next batch follows at once
        else:
            self.probe_sent = True  # one probe at a time; ``next`` waits for the answer
        self.check()

    def acknowledged(self, match_index: int) -> bool:
        """An OK response: the peer's log matches through ``match_index``. Returns whether
        that is news (a duplicate or late acknowledgement is not)."""
        news = match_index > self.match
        if news:
            self.match = match_index
            self.next = max(self.next, match_index + 1)
            self.inflights.free_le(match_index)
        self.check()
        return news

    def refusal_is_stale(self, rejected_index: int) -> bool:
        """Does a refusal of ``rejected_index`` answer a position already moved past?"""
        if self.state is _R:
            return rejected_index <= self.match
        if self.state is _P:
            return rejected_index != self.next - 1
        return False  # NEEDS_COPY: the caller looks at the hint instead

    def tombstoned_is_stale(self, rejected_index: int) -> bool:
        """Does a TOMBSTONED answer for ``rejected_index`` predate what the peer has since
        acknowledged? Unlike a log mismatch, a TOMBSTONED at ``match`` itself is current: a
        replica deleted after acknowledging everything answers the next heartbeat (sent at
        ``next - 1 == match``) so. One below ``match`` answers a request sent before that
        acknowledgement; if the peer really is deleted, the next heartbeat says so again."""
        if self.state is _R:
            return rejected_index < self.match
        return self.refusal_is_stale(rejected_index)


__all__ = ["PROGRESS_TRANSITIONS", "CopyExpected", "Inflights", "Progress", "ProgressState"]
