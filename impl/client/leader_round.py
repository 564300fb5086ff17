"""Leader discovery's bookkeeping, without I/O: one round, answer by answer.

One round, shared by the TabletClient (a tablet's leader among its replicas' servers,
tablet.py), the MasterClient (the leader master among the masters, master.py) and the
CLI's blocking reads of the masters (impl/cli/oneshot.py, no trio). Each driver says how to
ask one server (Admin.ConsensusState or Master.Status, bounded by the call timeout) and
what an answer means (an `Answer`, or an `Unanswered`); the round is the same:

* every known address is asked AT ONCE (a trio task each in discovery.py, a thread each in
  oneshot.py): one stalled server, listed first or not, costs nothing while a leader
  answers elsewhere;
* the first answer with role LEADER in a term no lower than any term already answered wins;
  the driver then stops asking (cancels the other questions, or stops waiting for them). A
  LEADER answer in a lower term is a deposed leader that has not heard yet: skipped (its
  term still counts);
* an answer that is not the leader may name addresses nobody asked yet (a leader hint, the
  peers of its config): they are asked in the same round, each at most once;
* the answers that are not the leader, and the failures, are kept in the order the servers
  were asked, for the caller's NoLeader error (the round itself raises nothing: the caller
  decides what "no leader" means, e.g. the TabletClient's "every server answered that it
  does not host the tablet" is counted here as ``absent``).

A late answer (after the winner) changes nothing. The round never retries: the callers own
backoff and deadlines (options.py).

`LeaderRound` is that state: ``ask`` says which addresses to put questions to,
``answered`` takes one answer and says whom it named that must be asked now, ``leader`` is
set once found, ``done`` when there is nothing more to wait for, and ``result`` is the
`Round` the callers read. Invariants (asserted): an address is asked at most once and
answers at most once; the leader is one of the addresses asked; ``absent`` never exceeds
the answers.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from revivify.impl.master import api
from revivify.impl.rpc.address import is_address

LEADER = "LEADER"


@attrs.frozen
class Answer:
    """One server's view: its ``role`` and ``term``; ``describe`` names what it is when
    not the leader (``FOLLOWER``, a replica state...); ``also_ask``: addresses it names
    that the round should ask too (asked at most once each)."""

    role: str
    term: int
    describe: str = ""
    also_ask: tuple[str, ...] = ()


@attrs.frozen
class Unanswered:
    """A server that gave no usable answer: ``reason`` for the error list; ``absent``:
    it answered that it does not have what is looked for (a tablet it does not host)."""

    reason: str
    absent: bool = False


@attrs.frozen
class Round:
    """The outcome of one round: the leader's address (None: none found), every address
    asked (in order), the non-leader answers and failures (in that order), and how many
    answered ``absent``."""

    leader: str | None
    asked: tuple[str, ...]
    errors: tuple[tuple[str, str], ...]
    absent: int

    @property
    def all_absent(self) -> bool:
        """Every server asked answered that it does not have it (none stayed silent)."""
        return bool(self.asked) and self.absent == len(self.asked)


class LeaderRound:
    """One round of leader discovery, fed one answer at a time (module docstring)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.leader: str | None = None
        self._answered: set[str] = set()
        self._errors: list[tuple[str, str]] = []
        self._absent = 0
        self._highest_term = -1

    def ask(self, addresses: Iterable[str]) -> list[str]:
        """Those of `addresses` to ask now, in order: each not asked yet in this round,
        none once the leader is found. They count as asked from here on."""
        new: list[str] = []
        for address in addresses:
            if address not in self.asked and self.leader is None:
                self.asked.append(address)
                new.append(address)
        return new

    def answered(self, address: str, answer: Answer | Unanswered) -> list[str]:
        """Take `address`'s answer; the addresses it named that must be asked now."""
        assert address in self.asked and address not in self._answered, address
        self._answered.add(address)
        if isinstance(answer, Unanswered):
            self._errors.append((address, answer.reason))
            self._absent += answer.absent
            return []
        if self.leader is not None:
            return []  # a late answer: the round is over
        if answer.role == LEADER and answer.term >= self._highest_term:
            self.leader = address
            return []
        self._highest_term = max(self._highest_term, answer.term)
        stale = " (a deposed leader)" if answer.role == LEADER else ""
        self._errors.append((address, f"{answer.describe or answer.role or 'no role'} in "
                                      f"term {answer.term}{stale}"))
        return self.ask(answer.also_ask)

    @property
    def done(self) -> bool:
        """Nothing more to wait for: the leader is found, or every address asked answered."""
        return self.leader is not None or len(self._answered) == len(self.asked)

    def result(self) -> Round:
        assert self.leader is None or self.leader in self.asked
        assert self._absent <= len(self.asked)
        order = {address: i for i, address in enumerate(self.asked)}
        return Round(self.leader, tuple(self.asked),
                     tuple(sorted(self._errors, key=lambda e: order[e[0]])), self._absent)


def master_answer(status: api.MasterStatus) -> Answer:
    """What one master's Master.Status means to a round: its role and term, and the leader
    it names (a valid HOST:PORT only) to be asked in the same round."""
    hinted = status.leader_address
    if hinted and is_address(hinted):
        return Answer(status.role, status.term, also_ask=(hinted,))
    return Answer(status.role, status.term)



__all__ = ["LEADER", "Answer", "LeaderRound", "Round", "Unanswered", "master_answer"]
