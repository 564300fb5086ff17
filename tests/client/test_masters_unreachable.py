"""No master answers (issue 31): the client says so in an operator's words.

Real TCP on the loopback: an address with nothing listening (connection refused) and a
listener that accepts and never answers (silent: the call timeout runs out). The error
names every address and what happened there, "no master answered at A, B (connection
refused)", not the catalog tablet's internal name, and still ends by the deadline (+ the
slack of impl/client/options.py). Then the words themselves (errors.py), and the CLI's
notice of a long wait (render.announce_wait): a line past 2 s for a script, a spinner on a
terminal, nothing for a deadline that ends soon after anyway.
"""

from __future__ import annotations

import io
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.testing

from revivify.impl.cli import render
from revivify.impl.client import ClientOptions, MastersUnreachable, NoMasterAnswered
from revivify.impl.client.errors import (
    NoAnswer,
    ServerUnreachable,
    masters_unreachable_text,
    unreachable_reason,
)
from revivify.impl.client.master import master_config, open_master_client
from revivify.impl.client.options import DEADLINE_SLACK
from revivify.impl.client.table import open_table_client
from revivify.impl.master import api
from revivify.impl.rpc import ConnectFailed

OPTIONS = ClientOptions(deadline=1.5, call_timeout=0.5)


def refused_address() -> str:
    """An address nothing listens on (bound, then closed: the kernel refuses it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@contextmanager
def silent_address() -> Iterator[str]:
    """An address that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def call_masters(masters: list[str], *, any_master: bool = False
                 ) -> tuple[BaseException, float]:
    """A catalog read of the leader, or with ``any_master`` a follower read (a freshness
    bound: any master may answer, `MasterClient.call_any`)."""
    async def main() -> tuple[BaseException, float]:
        async with open_master_client(masters, options=OPTIONS) as client:
            start = trio.current_time()
            try:
                if any_master:
                    await client.call_any(api.MASTER_LIST_TABLES, api.ListTablesRequest(5.0),
                                          api.TableList)
                else:
                    await client.call(api.MASTER_LIST_TABLES, api.ListTablesRequest(),
                                      api.TableList)
            except Exception as exc:
                return exc, trio.current_time() - start
        raise AssertionError("an answer from no master")

    return trio.run(main)


def test_refused_everywhere_is_one_operator_line() -> None:
    a, b = refused_address(), refused_address()
    error, took = call_masters([a, b])
    assert isinstance(error, MastersUnreachable), error
    assert str(error) == f"no master answered at {a}, {b} (connection refused)"
    assert "sys-catalog" not in str(error) and "\n" not in str(error)
    assert took <= OPTIONS.deadline + DEADLINE_SLACK


def test_a_silent_master_is_said_to_time_out() -> None:
    refused = refused_address()
    with silent_address() as silent:
        error, took = call_masters([silent, refused])
    assert isinstance(error, MastersUnreachable), error
    assert str(error) == (f"no master answered at {silent}, {refused} ({silent}: timed out "
                          f"after 0.5s; {refused}: connection refused)")
    assert took <= OPTIONS.deadline + DEADLINE_SLACK


@pytest.mark.parametrize("silent_first", [True, False])
def test_a_follower_read_says_the_same(silent_first: bool) -> None:
    """A read any master may answer (``--freshness``) with every master down: the same
    line as a read of the leader, not the last connection error ("cannot connect to B")."""
    refused = refused_address()
    with silent_address() as silent:
        masters = [silent, refused] if silent_first else [refused, silent]
        error, took = call_masters(masters, any_master=True)
    assert isinstance(error, MastersUnreachable), error
    said = {silent: f"{silent}: timed out after 0.5s", refused: f"{refused}: connection refused"}
    assert str(error) == (f"no master answered at {', '.join(masters)} "
                          f"({'; '.join(said[m] for m in masters)})")
    assert took <= OPTIONS.deadline + DEADLINE_SLACK


def test_a_table_operation_names_itself_first() -> None:
    address = refused_address()

    async def main() -> BaseException:
        async with open_table_client([address], "t", options=OPTIONS) as table:
            try:
                await table.get(b"k")
            except Exception as exc:
                return exc
        raise AssertionError("a row from no master")

    error = trio.run(main)
    assert isinstance(error, MastersUnreachable), error
    assert str(error) == f"get on table t: no master answered at {address} " \
                         f"(connection refused)"


def test_master_list_rows_come_in_the_order_asked_not_answered() -> None:
    """A silent master named first answers (its timeout) after a refused one named second:
    ``master list`` still shows them in the order named (its rows came in the order the
    answers did, a different order from one run to the next)."""
    refused = refused_address()
    with silent_address() as silent:
        view = trio.run(master_config, [silent, refused], OPTIONS)
    assert list(view.answers) == [silent, refused]
    assert view.answers == {silent: "timed out after 0.5s", refused: "connection refused"}


def test_the_reasons_in_operator_words() -> None:
    refused = ConnectFailed("h:1", "all attempts to connect to h:1 failed")
    refused.__cause__ = OSError("all attempts to connect to h:1 failed")
    refused.__cause__.__cause__ = ExceptionGroup(
        "attempts", [ConnectionRefusedError(111, "Connection refused")])
    assert unreachable_reason(refused) == "connection refused"
    assert unreachable_reason(NoAnswer("h:1", 2.0, maybe_sent=False)) == "timed out after 2s"
    assert unreachable_reason(ServerUnreachable("h:1", "no route")) == "no route"
    assert masters_unreachable_text([("a:1", "connection refused"),
                                     ("b:2", "connection refused")]) == \
        "no master answered at a:1, b:2 (connection refused)"
    assert str(NoMasterAnswered([("a:1", "timed out after 2s")])) == \
        "no master answered at a:1 (timed out after 2s)"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _announce(monkeypatch: pytest.MonkeyPatch, stream: io.StringIO, deadline: float,
              waited: float) -> str:
    """What announce_wait writes for a command answered after ``waited`` seconds."""
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setattr(render, "_progress_shown", False)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(render.announce_wait, "revivify table list", deadline)
            await trio.sleep(waited)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return stream.getvalue()


def test_a_long_wait_is_said_once_to_a_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TERM", "xterm")
    said = _announce(monkeypatch, io.StringIO(), 10.0, 5.0)
    assert said == ("revivify table list: still waiting for an answer after 2s (trying "
                    "until the deadline, 10s)\n")
    assert _announce(monkeypatch, io.StringIO(), 10.0, 1.5) == ""  # answered in time
    assert _announce(monkeypatch, io.StringIO(), 2.5, 2.4) == ""  # a deadline near anyway


def test_a_long_wait_spins_on_a_terminal_and_is_erased(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setenv("TERM", "xterm")
    said = _announce(monkeypatch, _Terminal(), 10.0, 4.0)
    assert "waiting for an answer, 3s of 10s" in said
    assert said.endswith("\r\033[K") and "\n" not in said
