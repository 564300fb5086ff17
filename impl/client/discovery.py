"""Leader discovery: ask every server at once, the first that says LEADER wins.

One round, shared by the TabletClient (a tablet's leader among its replicas' servers,
tablet.py) and the MasterClient (the leader master among the masters, master.py). Each
says how to ask one server (``question``: Admin.ConsensusState or Master.Status, bounded by
the call timeout) and what an answer means (an `Answer`, or an `Unanswered`); the round is
the same:

* every known address is asked AT ONCE, one task each in a nursery: one stalled server,
  listed first or not, costs nothing while a leader answers elsewhere;
* the first answer with role LEADER in a term no lower than any term already answered wins
  and cancels the other questions. A LEADER answer in a lower term is a deposed leader that
  has not heard yet: skipped (its term still counts);
* an answer that is not the leader may name addresses nobody asked yet (a leader hint, the
  peers of its config): they are asked in the same round;
* the answers that are not the leader, and the failures, are kept in the order the servers
  were asked, for the caller's NoLeader error (the round itself raises nothing: the caller
  decides what "no leader" means, e.g. the TabletClient's "every server answered that it
  does not host the tablet" is counted here as ``absent``).

A late answer (after the winner) changes nothing. The round never retries: the callers own
backoff and deadlines (options.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import attrs
import trio

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


Question = Callable[[str], Awaitable[Answer | Unanswered]]


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


async def discover_leader(addresses: Iterable[str], question: Question) -> Round:
    """One round of questions to every address at once (module docstring)."""
    asked: list[str] = []
    errors: list[tuple[str, str]] = []
    absent = 0
    highest_term = -1
    found: str | None = None

    async with trio.open_nursery() as nursery:

        def ask(address: str) -> None:
            if address not in asked and found is None:
                asked.append(address)
                nursery.start_soon(one, address)

        async def one(address: str) -> None:
            nonlocal highest_term, found, absent
            answer = await question(address)
            if isinstance(answer, Unanswered):
                errors.append((address, answer.reason))
                absent += answer.absent
                return
            if found is not None:
                return  # a late answer: the round is over
            if answer.role == LEADER and answer.term >= highest_term:
                found = address
                nursery.cancel_scope.cancel()
                return
            highest_term = max(highest_term, answer.term)
            stale = " (a deposed leader)" if answer.role == LEADER else ""
            errors.append((address, f"{answer.describe or answer.role or 'no role'} in "
                                    f"term {answer.term}{stale}"))
            for other in answer.also_ask:
                ask(other)

        for address in addresses:
            ask(address)

    assert found is None or found in asked
    assert absent <= len(asked)
    order = {address: i for i, address in enumerate(asked)}
    return Round(found, tuple(asked), tuple(sorted(errors, key=lambda e: order[e[0]])),
                 absent)


__all__ = ["LEADER", "Answer", "Question", "Round", "Unanswered", "discover_leader"]
