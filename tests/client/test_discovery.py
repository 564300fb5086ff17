"""The shared leader-discovery round (impl/client/leader_round.py, driven by trio in
impl/client/discovery.py) with scripted servers: the first LEADER answer wins at once, a
deposed leader is skipped, named addresses are asked in the same round, a stalled server
costs nothing, failures come back in ask order; and the round alone, fed by hand as the
CLI's threads feed it (impl/cli/oneshot.py)."""

from __future__ import annotations

from collections.abc import Mapping

import trio
import trio.testing

from revivify.impl.client.discovery import Answer, Round, Unanswered, discover_leader
from revivify.impl.client.leader_round import LeaderRound, master_answer
from revivify.impl.master import api

Script = Mapping[str, tuple[float, Answer | Unanswered]]


def play(addresses: list[str], script: Script) -> tuple[Round, float, list[str]]:
    """Run one round against ``script`` (address -> (delay, answer); a missing address
    never answers): the round, how long it took, who was asked."""
    asked: list[str] = []
    out: list[tuple[Round, float]] = []

    async def question(address: str) -> Answer | Unanswered:
        asked.append(address)
        if address not in script:
            await trio.sleep_forever()
        delay, answer = script[address]
        await trio.sleep(delay)
        return answer

    async def main() -> None:
        start = trio.current_time()
        found = await discover_leader(addresses, question)
        out.append((found, trio.current_time() - start))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return out[0][0], out[0][1], asked


def test_the_first_leader_wins_and_a_stalled_server_costs_nothing() -> None:
    found, took, _ = play(["stalled", "b", "c"], {
        "b": (0.2, Answer("FOLLOWER", 3)), "c": (0.1, Answer("LEADER", 3))})
    assert found.leader == "c" and took == 0.1


def test_a_deposed_leader_is_skipped() -> None:
    found, _, _ = play(["a", "b", "c"], {
        "a": (0.1, Answer("FOLLOWER", 5)), "b": (0.2, Answer("LEADER", 4)),
        "c": (0.3, Answer("LEADER", 5))})
    assert found.leader == "c"
    assert ("b", "LEADER in term 4 (a deposed leader)") in found.errors


def test_named_addresses_are_asked_in_the_same_round() -> None:
    found, _, asked = play(["a"], {
        "a": (0.1, Answer("FOLLOWER", 1, also_ask=("x", "a"))),
        "x": (0.1, Answer("LEADER", 1))})
    assert found.leader == "x" and asked == ["a", "x"]


def test_no_leader_lists_every_answer_in_ask_order() -> None:
    found, _, _ = play(["a", "b", "c"], {
        "a": (0.3, Unanswered("refused")), "b": (0.1, Answer("FOLLOWER", 2, "FOLLOWER")),
        "c": (0.2, Unanswered("not hosted", absent=True))})
    assert found.leader is None and not found.all_absent
    assert found.errors == (("a", "refused"), ("b", "FOLLOWER in term 2"),
                            ("c", "not hosted"))


def test_every_server_absent() -> None:
    found, _, _ = play(["a", "b"], {"a": (0.1, Unanswered("no", absent=True)),
                                    "b": (0.1, Unanswered("no", absent=True))})
    assert found.all_absent and found.leader is None


def test_the_round_alone_asks_each_address_once_and_ignores_late_answers() -> None:
    leader_round = LeaderRound()
    assert leader_round.ask(["a", "b", "a"]) == ["a", "b"]
    assert leader_round.answered("a", Answer("FOLLOWER", 2, also_ask=("c", "b"))) == ["c"]
    assert not leader_round.done
    assert leader_round.answered("c", Answer("LEADER", 2)) == []
    assert leader_round.leader == "c" and leader_round.done
    assert leader_round.answered("b", Answer("LEADER", 3)) == []  # late: the round is over
    assert leader_round.ask(["d"]) == []
    assert leader_round.result() == Round("c", ("a", "b", "c"),
                                          (("a", "FOLLOWER in term 2"),), 0)


def test_a_masters_status_names_its_leader_to_ask() -> None:
    def status(hint: str) -> api.MasterStatus:
        return api.MasterStatus(uuid="u", address="m:1", role="FOLLOWER", term=4,
                                leader="l", leader_address=hint, ready=False, masters=[])
    assert master_answer(status("m:2")) == Answer("FOLLOWER", 4, also_ask=("m:2",))
    assert master_answer(status("")) == Answer("FOLLOWER", 4)
    assert master_answer(status("no port")) == Answer("FOLLOWER", 4)
