"""Calls to the servers on blocking sockets, without trio: the fast path of the commands
that ask one question (issue 31: a call that talks to one server answers in well under
150 ms, and trio alone costs more than that to import).

The trio client (impl/client) is the general machine: pools of connections, leader
discovery, retries, deadlines threaded through everything. A command that asks one
question needs little of it, and importing trio and the client library costs several
times what the calls themselves do. This caller speaks the same wire with the same code:
the frames of impl/rpc/framing.py, the envelopes, bodies and error registry of
impl/rpc/codec.py (nothing of the protocol is written twice), on plain sockets.

Three calls:

* `call`: one server, one question (``tserver status``, ``master status``);
* `master_read`: a read answered by the leader master, found the way the MasterClient finds
  it (impl/client/master.py "Finding the leader"): ``Master.Status`` of every master AT
  ONCE, a thread each (the round of impl/client/leader_round.py, the same `LeaderRound`
  the trio client drives; a leader hint names a master to ask in the same round), the first
  LEADER in a term no lower than any answered wins, then the read at it; or, with
  ``any_master`` (a read that names a freshness bound, KUDU-500), the masters in the order
  given, the first that answers (MasterClient.call_any's first pass) (``table list``,
  ``table describe``, ``tserver list``);
* `master_statuses`: ``Master.Status`` of several masters at once (``master list``).

It is a fast path, not a second client: it answers only the plain case, in which every
server it needs takes the connection, refuses the UUID handshake naming its UUID (the call
to UUID ``""``, impl/client/connections.py) and answers. On anything else (a refused
connect, an error answer, a reset, no leader in the round, a leader that says it is not,
or not ready) it returns None and the command runs its usual trio path, whose retries,
errors and messages stay the one source of truth: the output, the JSON and the exit code
are the trio path's whichever path answered (tests/cluster_cli/test_fast_reads.py compares
them). A master read spends at most the seconds it is given (common.fast_first: a second,
at most half the command's --deadline) and each question at most the call timeout; the
trio path gets what is left of the deadline, so a silent master costs the deadline once.
`call` instead raises `OutOfTime` when its one server stays silent for the whole time (its
callers say so themselves: a stalled server costs the deadline once, not twice). With a
fault file active (impl/faultfile.py, tests only) every call defers: the injected faults
are the trio client's to apply.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Sequence
from typing import TypeVar

from revivify.impl.client.leader_round import LeaderRound, Unanswered, master_answer
from revivify.impl.master.api import (
    MASTER_STATUS,
    Empty,
    MasterStatus,
    Refused,
)
from revivify.impl.rpc.address import parse_address
from revivify.impl.rpc.codec import (
    Request,
    decode_response,
    decode_response_body,
    encode_body,
    encode_request,
    error_from_response,
    error_registry,
)
from revivify.impl.rpc.errors import RpcError, WrongServerUuid
from revivify.impl.rpc.framing import FrameDecoder, encode_frame

T = TypeVar("T")

FAULT_FILE_ENV = "REVIVIFY_FAULT_FILE"  # impl/faultfile.py ENV (not imported: attrs, json)
HANDSHAKE_UUID = ""  # impl/client/connections.py: no server has it, every server refuses it
MASTER_CLIENT_UUID = "revivify-client"  # impl/client/master.py CLIENT_UUID: whom calls are from
RECEIVE_SIZE = 64 * 1024


class OutOfTime(Exception):
    """No answer before the deadline."""


class _Deferred(Exception):
    """This call is not for the fast path (the command takes the trio path)."""


# What ends a fast attempt with "not here: the trio path": a socket's error or timeout, an
# error answer (RpcError: the server's AppErrors are registered with it), a closed
# connection, a frame or address that does not parse (ValueError).
_NOT_PLAIN = (OSError, RpcError, _Deferred, ValueError, OutOfTime)


class _Connection:
    """One blocking connection: send a request, read frames until its response, each read
    bounded by the absolute `deadline` (time.monotonic)."""

    def __init__(self, address: str, src_uuid: str, deadline: float) -> None:
        host, port = parse_address(address)
        left = deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime
        try:
            self.sock = socket.create_connection((host, port), timeout=left)
        except TimeoutError:
            raise OutOfTime from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.src_uuid = src_uuid
        self.deadline = deadline
        self.decoder = FrameDecoder()
        self.next_call_id = 1
        self.errors = error_registry()

    def close(self) -> None:
        self.sock.close()

    def uuid(self, method: str, request: object, response_type: type[object]) -> str:
        """The server's UUID, from its refusal of a call to UUID "" (`method`, as the real
        call will be: a server that does not know the method says so here)."""
        try:
            self.call(HANDSHAKE_UUID, method, request, response_type)
        except WrongServerUuid as refusal:
            return refusal.expected
        raise _Deferred("a server whose UUID is empty")  # the trio path says what it is

    def call(self, dest_uuid: str, method: str, request: object, response_type: type[T]) -> T:
        call_id, self.next_call_id = self.next_call_id, self.next_call_id + 1
        envelope = Request(call_id=call_id, method=method, dest_uuid=dest_uuid,
                           src_uuid=self.src_uuid, lamport=0, body=encode_body(request))
        self.sock.sendall(encode_frame(encode_request(envelope)))
        while True:
            for payload in self._frames():
                response = decode_response(payload)
                if response.call_id != call_id:
                    continue  # not ours (no other call is in flight: never in practice)
                if not response.ok:
                    raise error_from_response(response, self.errors)
                return decode_response_body(response, response_type, method)

    def _frames(self) -> list[bytes]:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(RECEIVE_SIZE)
        except TimeoutError:
            raise OutOfTime from None
        if not data:
            raise _Deferred("connection closed")
        return self.decoder.feed(data)


def _ask(address: str, src_uuid: str, method: str, request: object, response_type: type[T],
         deadline: float) -> T:
    """`method`'s answer from the server at `address` (the handshake first), by `deadline`;
    raises what went wrong (one of _NOT_PLAIN)."""
    connection = _Connection(address, src_uuid, deadline)
    try:
        uuid = connection.uuid(method, request, response_type)
        return connection.call(uuid, method, request, response_type)
    finally:
        connection.close()


def _fault_file_on() -> bool:
    return bool(os.environ.get(FAULT_FILE_ENV))


def call(address: str, src_uuid: str, method: str, request: object, response_type: type[T],
         deadline_seconds: float) -> T | None:
    """`method`'s typed answer from the server at `address`, its UUID learnt first by the
    handshake; None when the fast path does not apply (the caller takes the trio path);
    OutOfTime when the server stays silent for `deadline_seconds`."""
    if _fault_file_on():
        return None
    try:
        return _ask(address, src_uuid, method, request, response_type,
                    time.monotonic() + deadline_seconds)
    except OutOfTime:
        raise
    except _NOT_PLAIN:
        return None


# ---------------------------------------------------------------------------- the masters


class _Questions:
    """Master.Status of several masters at once, a daemon thread each, their answers in one
    queue in the order they come. A thread's question is bounded by `deadline`, so none
    outlives the round by more than that; the caller stops waiting when it has what it
    needs (a thread left behind ends by itself and touches nothing shared but the queue)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.answers: queue.SimpleQueue[tuple[str, MasterStatus | Exception]] = \
            queue.SimpleQueue()
        self.pending = 0

    def ask(self, addresses: Sequence[str]) -> None:
        for address in addresses:
            self.pending += 1
            threading.Thread(target=self._question, args=(address,), daemon=True,
                             name=f"Master.Status {address}").start()

    def _question(self, address: str) -> None:
        answer: MasterStatus | Exception
        try:
            answer = _ask(address, MASTER_CLIENT_UUID, MASTER_STATUS, Empty(), MasterStatus,
                          self.deadline)
        except Exception as exc:  # handed to the waiting thread, which defers on it
            answer = exc
        self.answers.put((address, answer))

    def next(self) -> tuple[str, MasterStatus | Exception] | None:
        """The next answer to come, or None when none is pending or the deadline passed."""
        left = self.deadline - time.monotonic()
        if self.pending == 0 or left <= 0:
            return None
        try:
            found = self.answers.get(timeout=left)
        except queue.Empty:
            return None
        self.pending -= 1
        return found


def _find_leader(masters: Sequence[str], deadline: float) -> str | None:
    """The leader master's address, by one round of leader_round.py (every master asked at
    once, hints asked in the same round); None when the round ends without one."""
    leader_round = LeaderRound()
    questions = _Questions(deadline)
    questions.ask(leader_round.ask(masters))
    while not leader_round.done:
        found = questions.next()
        if found is None:
            return None  # out of time: the trio path waits for the rest
        address, status = found
        if isinstance(status, MasterStatus):
            questions.ask(leader_round.answered(address, master_answer(status)))
        else:
            leader_round.answered(address, Unanswered(str(status)))
    return leader_round.leader


def master_read(masters: Sequence[str], method: str, request: object,
                response_type: type[T], *, call_timeout: float, seconds: float,
                any_master: bool = False) -> T | None:
    """`method` (a read) answered by the leader master, or with `any_master` by the first
    of `masters` that answers (module docstring); None when the fast path does not apply.
    Spends at most `seconds`, and at most `call_timeout` on any one question."""
    if _fault_file_on():
        return None
    deadline = time.monotonic() + seconds
    try:
        if any_master:
            for address in dict.fromkeys(masters):
                try:
                    return _ask(address, MASTER_CLIENT_UUID, method, request,
                                response_type, min(deadline, time.monotonic() + call_timeout))
                except Refused as exc:
                    if not exc.retryable:
                        return None  # a definite no (NOT_FOUND): the trio path's Rejected
                except _NOT_PLAIN:
                    pass  # stale, not ready, unreachable: call_any asks the next master
            return None
        leader = _find_leader(list(dict.fromkeys(masters)),
                              min(deadline, time.monotonic() + call_timeout))
        if leader is None:
            return None
        return _ask(leader, MASTER_CLIENT_UUID, method, request, response_type,
                    min(deadline, time.monotonic() + call_timeout))
    except _NOT_PLAIN:
        return None


def master_statuses(addresses: Sequence[str], *, call_timeout: float, seconds: float
                    ) -> dict[str, MasterStatus] | None:
    """Master.Status of every one of `addresses`, asked at once; None unless every one
    answered (the trio path says what the others did), within `seconds` and the call
    timeout."""
    if _fault_file_on():
        return None
    questions = _Questions(time.monotonic() + min(seconds, call_timeout))
    wanted = list(dict.fromkeys(addresses))
    questions.ask(wanted)
    answers: dict[str, MasterStatus] = {}
    while len(answers) < len(wanted):
        found = questions.next()
        if found is None or not isinstance(found[1], MasterStatus):
            return None
        answers[found[0]] = found[1]
    return {address: answers[address] for address in wanted}  # in the order asked


__all__ = ["OutOfTime", "call", "master_read", "master_statuses"]
