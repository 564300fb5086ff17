"""Leader discovery under trio: one round (impl/client/leader_round.py), every question a
task of one nursery.

The round's rules and its bookkeeping are leader_round.py's (`LeaderRound`, no I/O); this
is its trio shell, which the TabletClient (tablet.py) and the MasterClient (master.py)
drive: a task per address the round says to ask, each answer handed to the round as it
comes, the addresses it names started in the same nursery, and the nursery cancelled the
moment the round has its leader (a stalled question costs nothing then). The CLI's blocking
reads (impl/cli/oneshot.py) drive the same round with threads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import trio

from .leader_round import LEADER, Answer, LeaderRound, Round, Unanswered

Question = Callable[[str], Awaitable[Answer | Unanswered]]


async def discover_leader(addresses: Iterable[str], question: Question) -> Round:
    """One round of questions to every address at once (leader_round.py)."""
    leader_round = LeaderRound()

    async with trio.open_nursery() as nursery:

        async def one(address: str) -> None:
            answer = await question(address)
            for other in leader_round.answered(address, answer):
                nursery.start_soon(one, other)
            if leader_round.leader is not None:
                nursery.cancel_scope.cancel()

        for address in leader_round.ask(addresses):
            nursery.start_soon(one, address)

    return leader_round.result()


__all__ = ["LEADER", "Answer", "Question", "Round", "Unanswered", "discover_leader"]
