"""The tablet-server map: registration, liveness with an injected clock, full reports."""

from __future__ import annotations

import pytest

from revivify.impl.master.placement import Candidate
from revivify.impl.master.tserver_map import RegState, TabletServerMap
from revivify.impl.tserver.master_api import Heartbeat, Registration, TabletReport


def leader_map(dead_after: float = 10.0) -> TabletServerMap:
    tsmap = TabletServerMap("m-1", dead_after=dead_after)
    tsmap.set_leadership(1, leader=True)
    return tsmap


def register(tsmap: TabletServerMap, uuid: str, now: float, incarnation: int = 1) -> None:
    tsmap.heartbeat(Heartbeat(uuid, incarnation, Registration(f"addr-{uuid}")), now)


class TestRegistration:
    def test_an_unknown_server_is_asked_to_register_and_its_report_dropped(self) -> None:
        tsmap = leader_map()
        verdict = tsmap.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(True, 0, [])), 0.0)
        assert verdict.response.needs_register and verdict.report is None
        assert tsmap.entry("ts-1") is None

    def test_registration_then_a_full_report_then_incrementals(self) -> None:
        tsmap = leader_map()
        register(tsmap, "ts-1", 0.0)
        assert tsmap.heartbeat(Heartbeat("ts-1", 1), 0.5).response.needs_full_report
        verdict = tsmap.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(True, 0, [])), 1.0)
        assert verdict.report is not None and not verdict.response.needs_full_report
        verdict = tsmap.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(False, 1, [])), 2.0)
        assert verdict.inputs == ("incremental_report",) and verdict.report is not None

    def test_registration_and_a_full_report_in_one_heartbeat(self) -> None:
        tsmap = leader_map()
        verdict = tsmap.heartbeat(Heartbeat("ts-1", 1, Registration("a"),
                                            TabletReport(True, 0, [])), 0.0)
        assert verdict.inputs == ("register", "full_report") and verdict.report is not None
        entry = tsmap.entry("ts-1")
        assert entry is not None and entry.state is RegState.REPORTING

    def test_a_restarted_server_is_asked_to_register_again(self) -> None:
        tsmap = leader_map()
        tsmap.heartbeat(Heartbeat("ts-1", 1, Registration("a"), TabletReport(True, 0, [])), 0.0)
        verdict = tsmap.heartbeat(Heartbeat("ts-1", 2, report=TabletReport(True, 0, [])), 1.0)
        assert verdict.response.needs_register and verdict.report is None
        verdict = tsmap.heartbeat(Heartbeat("ts-1", 2, Registration("b"),
                                            TabletReport(True, 0, [])), 2.0)
        assert verdict.report is not None and tsmap.address("ts-1") == "b"

    def test_stale_reports_are_dropped_and_a_gap_asks_for_a_full_report(self) -> None:
        tsmap = leader_map()
        tsmap.heartbeat(Heartbeat("ts-1", 1, Registration("a"), TabletReport(True, 3, [])), 0.0)
        stale = tsmap.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(False, 3, [])), 1.0)
        assert stale.inputs == ("stale_report",) and stale.report is None
        gap = tsmap.heartbeat(Heartbeat("ts-1", 1, report=TabletReport(False, 5, [])), 2.0)
        assert gap.report is not None and gap.response.needs_full_report

    def test_followers_never_process_reports_and_a_new_leader_asks_everyone(self) -> None:
        tsmap = TabletServerMap("m-2", dead_after=10.0)
        for uuid in ("ts-1", "ts-2"):
            verdict = tsmap.heartbeat(Heartbeat(uuid, 1, Registration("a"),
                                                TabletReport(True, 0, [])), 0.0)
            assert verdict.report is None and not verdict.response.needs_full_report
            assert not verdict.response.leader
        tsmap.set_leadership(4, leader=True)
        for uuid in ("ts-1", "ts-2"):
            response = tsmap.heartbeat(Heartbeat(uuid, 1), 1.0).response
            assert response.needs_full_report and response.leader and response.term == 4

    def test_becoming_leader_again_in_a_new_term_asks_for_full_reports_again(self) -> None:
        tsmap = leader_map()
        tsmap.heartbeat(Heartbeat("ts-1", 1, Registration("a"), TabletReport(True, 0, [])), 0.0)
        tsmap.set_leadership(1, leader=True)  # the same term: nothing to redo
        assert not tsmap.heartbeat(Heartbeat("ts-1", 1), 1.0).response.needs_full_report
        tsmap.set_leadership(2, leader=False)
        tsmap.set_leadership(3, leader=True)
        assert tsmap.heartbeat(Heartbeat("ts-1", 1), 2.0).response.needs_full_report
        with pytest.raises(AssertionError):
            tsmap.set_leadership(2, leader=True)


class TestLiveness:
    def test_live_until_dead_after_seconds_without_a_heartbeat(self) -> None:
        tsmap = leader_map(dead_after=5.0)
        register(tsmap, "ts-1", 0.0)
        register(tsmap, "ts-2", 3.0)
        assert tsmap.candidates(5.0) == [Candidate("ts-1", "addr-ts-1"),
                                         Candidate("ts-2", "addr-ts-2")]
        assert tsmap.candidates(5.5) == [Candidate("ts-2", "addr-ts-2")]
        described = {i.uuid: i for i in tsmap.describe(6.0)}
        assert not described["ts-1"].live and described["ts-1"].seconds_since_heartbeat == 6.0
        assert described["ts-2"].live
        tsmap.heartbeat(Heartbeat("ts-1", 1), 7.0)  # back
        assert tsmap.is_live("ts-1", 7.0)

    def test_a_heartbeat_under_another_incarnation_does_not_refresh_liveness(self) -> None:
        tsmap = leader_map(dead_after=5.0)
        register(tsmap, "ts-1", 0.0)
        tsmap.heartbeat(Heartbeat("ts-1", 2), 4.0)
        assert not tsmap.is_live("ts-1", 6.0)

    def test_the_clock_never_goes_back(self) -> None:
        tsmap = leader_map()
        register(tsmap, "ts-1", 5.0)
        with pytest.raises(AssertionError):
            tsmap.heartbeat(Heartbeat("ts-1", 1), 4.0)

    def test_report_failed_asks_for_a_full_report(self) -> None:
        tsmap = leader_map()
        tsmap.heartbeat(Heartbeat("ts-1", 1, Registration("a"), TabletReport(True, 0, [])), 0.0)
        tsmap.report_failed("ts-1")
        tsmap.report_failed("nobody")
        assert tsmap.heartbeat(Heartbeat("ts-1", 1), 1.0).response.needs_full_report
