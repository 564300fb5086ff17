"""The checker on tiny histories: both verdicts, open-ended operations, cas, kv keys, and the
smallest failing window."""

from __future__ import annotations

from revivify.checker.linearizability import UNWRITTEN, search, to_search_ops

from .histories import check, fail, history, info, inv, linearizable, ok


class TestRegister:
    def test_empty_history_is_linearizable(self) -> None:
        assert linearizable([])

    def test_a_read_sees_the_last_write(self) -> None:
        assert linearizable([inv(0, "write", 1), ok(0, "write", 1),
                             inv(0, "read"), ok(0, "read", 1)])

    def test_a_read_of_another_value_is_not_linearizable(self) -> None:
        assert not linearizable([inv(0, "write", 1), ok(0, "write", 1),
                                 inv(1, "read"), ok(1, "read", 2)])

    def test_the_register_starts_as_nil(self) -> None:
        assert linearizable([inv(0, "read"), ok(0, "read", None)])
        assert not linearizable([inv(0, "read"), ok(0, "read", 0)])

    def test_a_stale_read_after_a_completed_write_is_not_linearizable(self) -> None:
        assert not linearizable([inv(0, "write", 1), ok(0, "write", 1),
                                 inv(1, "read"), ok(1, "read", None)])

    def test_a_read_concurrent_with_a_write_sees_either_value(self) -> None:
        for seen in (None, 1):
            assert linearizable([inv(0, "write", 1), inv(1, "read"), ok(1, "read", seen),
                                 ok(0, "write", 1)])

    def test_new_then_old_value_is_not_linearizable(self) -> None:
        # Both reads overlap the write, but once one has seen 1 a later one cannot see nil.
        assert not linearizable([inv(0, "write", 1),
                                 inv(1, "read"), ok(1, "read", 1),
                                 inv(2, "read"), ok(2, "read", None),
                                 ok(0, "write", 1)])
        assert linearizable([inv(0, "write", 1),
                             inv(1, "read"), ok(1, "read", None),
                             inv(2, "read"), ok(2, "read", 1),
                             ok(0, "write", 1)])

    def test_writes_order_by_real_time_or_freely_when_concurrent(self) -> None:
        sequential = [inv(0, "write", 1), ok(0, "write", 1), inv(1, "write", 2),
                      ok(1, "write", 2), inv(2, "read"), ok(2, "read", 1)]
        assert not linearizable(sequential)
        concurrent = [inv(0, "write", 1), inv(1, "write", 2), ok(0, "write", 1),
                      ok(1, "write", 2), inv(2, "read"), ok(2, "read", 1)]
        assert linearizable(concurrent)


class TestCas:
    def test_a_cas_that_found_its_value(self) -> None:
        assert linearizable([inv(0, "write", 1), ok(0, "write", 1),
                             inv(0, "cas", [1, 2]), ok(0, "cas", [1, 2]),
                             inv(1, "read"), ok(1, "read", 2)])

    def test_an_ok_cas_whose_expected_value_was_never_there(self) -> None:
        assert not linearizable([inv(0, "write", 1), ok(0, "write", 1),
                                 inv(0, "cas", [3, 2]), ok(0, "cas", [3, 2])])

    def test_a_cas_from_nil(self) -> None:
        assert linearizable([inv(0, "cas", [None, 5]), ok(0, "cas", [None, 5]),
                             inv(0, "read"), ok(0, "read", 5)])

    def test_a_failed_cas_took_no_effect(self) -> None:
        base = [inv(0, "write", 1), ok(0, "write", 1),
                inv(0, "cas", [1, 2]), fail(0, "cas", [1, 2]), inv(1, "read")]
        assert linearizable([*base, ok(1, "read", 1)])
        assert not linearizable([*base, ok(1, "read", 2)])
        assert history([*base, ok(1, "read", 1)]).failed == 1

    def test_only_one_of_two_concurrent_cas_from_the_same_value_succeeds(self) -> None:
        start = [inv(0, "write", 0), ok(0, "write", 0),
                 inv(1, "cas", [0, 1]), inv(2, "cas", [0, 2])]
        assert not linearizable([*start, ok(1, "cas", [0, 1]), ok(2, "cas", [0, 2])])
        assert linearizable([*start, ok(1, "cas", [0, 1]), fail(2, "cas", [0, 2])])


class TestOpenEnded:
    def test_a_write_never_completed_may_take_effect(self) -> None:
        assert linearizable([inv(0, "write", 1), inv(1, "read"), ok(1, "read", 1)])

    def test_a_write_never_completed_may_never_take_effect(self) -> None:
        assert linearizable([inv(0, "write", 1), inv(1, "read"), ok(1, "read", None)])

    def test_once_seen_an_open_write_stays_in_effect(self) -> None:
        assert not linearizable([inv(0, "write", 1),
                                 inv(1, "read"), ok(1, "read", 1),
                                 inv(1, "read"), ok(1, "read", None)])

    def test_an_info_write_may_take_effect_long_after_its_info(self) -> None:
        # The info line is no return: the write may land after the later write of 2.
        assert linearizable([inv(0, "write", 1), info(0, "write", 1),
                             inv(1, "write", 2), ok(1, "write", 2),
                             inv(1, "read"), ok(1, "read", 2),
                             inv(1, "read"), ok(1, "read", 1)])

    def test_an_open_write_cannot_take_effect_before_its_invocation(self) -> None:
        assert not linearizable([inv(1, "read"), ok(1, "read", 1),
                                 inv(0, "write", 1), info(0, "write", 1)])

    def test_an_open_cas_takes_effect_only_from_its_expected_value(self) -> None:
        assert linearizable([inv(0, "cas", [None, 1]), info(0, "cas", None),
                             inv(1, "read"), ok(1, "read", 1)])
        assert not linearizable([inv(2, "write", 3), ok(2, "write", 3),
                                 inv(0, "cas", [None, 1]), info(0, "cas", None),
                                 inv(1, "read"), ok(1, "read", 1)])

    def test_a_process_may_invoke_again_after_an_info(self) -> None:
        assert linearizable([inv(0, "write", 1), info(0, "write", None),
                             inv(0, "read"), ok(0, "read", 1)])

    def test_unknown_reads_are_dropped(self) -> None:
        h = history([inv(0, "read"), info(0, "read"), inv(1, "read")])
        assert h.operations == () and h.unknown_reads == 2


class TestKv:
    def test_keys_are_separate_registers(self) -> None:
        assert linearizable([inv(0, "write", 1, key="a"), ok(0, "write", 1, key="a"),
                             inv(1, "read", key="b"), ok(1, "read", None, key="b"),
                             inv(1, "read", key="a"), ok(1, "read", 1, key="a")], kv=True)

    def test_only_the_failing_key_is_reported(self) -> None:
        result = check([inv(0, "write", 1, key="a"), ok(0, "write", 1, key="a"),
                        inv(1, "write", 1, key=7), ok(1, "write", 1, key=7),
                        inv(2, "read", key=7), ok(2, "read", 2, key=7),
                        inv(2, "read", key="a"), ok(2, "read", 1, key="a")], kv=True)
        assert not result.linearizable
        assert [k.key for k in result.keys] == ["a", 7]
        assert [k.key for k in result.failures] == [7]
        window = result.failures[0].window
        assert window is not None and window.key == 7

    def test_a_value_written_to_another_key_does_not_help(self) -> None:
        assert not linearizable([inv(0, "write", 1, key="a"), ok(0, "write", 1, key="a"),
                                 inv(1, "read", key="b"), ok(1, "read", 1, key="b")], kv=True)


def _long_prefix(n: int) -> list:  # type: ignore[type-arg]
    """n rounds of: process 0 writes i while process 1 reads (seeing i-1 or i)."""
    lines = []
    for i in range(n):
        lines += [inv(0, "write", i), inv(1, "read"), ok(1, "read", i - 1 if i else None),
                  ok(0, "write", i)]
    return lines


class TestSmallestWindow:
    def test_the_window_is_the_stale_read_and_the_write_before_it(self) -> None:
        lines = [*_long_prefix(50),  # lines 1-200, linearizable
                 inv(2, "write", 100), ok(2, "write", 100),  # 201, 202
                 inv(3, "read"), ok(3, "read", 49),  # 203, 204: stale
                 inv(0, "write", 7), ok(0, "write", 7)]  # 205, 206: after the failure
        result = check(lines)
        assert not result.linearizable
        window = result.keys[0].window
        assert window is not None and window.minimal and not window.from_nil
        assert (window.first_line, window.last_line) == (201, 204)
        assert [(w.op.f, w.op.value, w.role) for w in window.operations] == [
            ("write", 100, "complete"), ("read", 49, "complete")]

    def test_a_failure_at_the_start_is_a_window_from_nil(self) -> None:
        lines = [inv(0, "read"), ok(0, "read", 3), *_long_prefix(5)]
        window = check(lines).keys[0].window
        assert window is not None and window.from_nil
        assert (window.first_line, window.last_line) == (1, 2)

    def test_concurrent_unknown_writes_stay_in_the_window(self) -> None:
        # The read of 5 is explained by no operation: the info write of 4 straddles the
        # window's start and is part of it (it might have landed inside).
        lines = [inv(0, "write", 4), info(0, "write", None),
                 inv(1, "write", 1), ok(1, "write", 1),
                 inv(2, "read"), ok(2, "read", 5)]
        window = check(lines).keys[0].window
        assert window is not None
        roles = {(w.op.f, w.op.value): w.role for w in window.operations}
        assert roles[("read", 5)] == "complete"
        assert all(role in ("complete", "straddling", "pending") for role in roles.values())

    def test_the_window_fails_on_its_own_from_every_value(self) -> None:
        lines = [*_long_prefix(20), inv(2, "write", 100), ok(2, "write", 100),
                 inv(3, "read"), ok(3, "read", 19)]
        h = history(lines)
        window = check(lines).keys[0].window
        assert window is not None
        start = min(w.op.call for w in window.operations if w.role == "complete")
        end = max(w.op.ret for w in window.operations if w.op.ret is not None) + 1
        ops = to_search_ops(h.operations, start, end)
        for initial in (None, UNWRITTEN, 19, 100, 3):
            assert not search(ops, initial).linearizable
        # ... and one event shorter at either end it is linearizable from some value.
        assert search(to_search_ops(h.operations, start + 1, end), 19).linearizable
        assert search(to_search_ops(h.operations, start, end - 1), 100).linearizable
