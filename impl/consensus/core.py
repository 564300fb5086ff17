"""The Raft core of one tablet replica: a plain object, no I/O (etcd's RawNode shape).

Rules of this file
------------------
* No trio, no sockets, no files, no clocks, no global randomness. Inputs are method calls:
  ``tick()`` (time, counted in ticks), ``step(message)``, ``propose(data)``,
  ``propose_config_change(change, cas_index)``, ``read_index(request_id)``,
  ``transfer_leadership(uuid)``, ``step_down()``, ``campaign()``. Randomness (election
  timeouts) comes from the injected ``random.Random``.
* Output is one ordered batch, ``ready()``, which the shell executes in order and then
  acknowledges with ``advance(ready)``:

    1. ``steps``: each is ONE durable change (a cmeta write: term, vote, committed config;
       or one WAL append of a batch of entries) or none, and ONE trace fact describing it.
       The shell makes the change durable (fsync), then writes the fact, then the next.
       So a process killed at any moment loses at most the fact of the step in flight.
    2. ``messages``, each with ``after_steps``: how many of the batch's steps the core
       had emitted when it sent it. A message leaves only once those steps are durable
       AND traced (no vote granted, no entry acknowledged before it is on disk, and no
       message whose receiver traces a consequence before the sender traced the cause,
       e.g. a new leader's first append before its become_leader). One exception: an
       AppendRequest may overtake the leader's own WAL appends of the entries it carries,
       so that followers write to their disks while the leader writes to its own (Raft
       thesis 10.2.1): a leader counts itself toward a commit only once ``advance`` says
       its own append is durable. ``plan.plan(ready)`` spells this out as one flat list
       of effects, which every shell walks in order.
    3. ``committed``: entries to apply, in order (durable on this node and committed).
    4. ``read_states``: ReadIndex requests confirmed: (request_id, index); answer once the
       state machine has applied ``index``.
* Every (role, input) pair is a row of ``RAFT_TRANSITIONS``, keyed by the input's type (a
  message class, or ``Tick``); a missing pair is a RaftProtocolError (a test tries every
  pair). Rows whose handler may change durable state name the trace facts they can emit.

Raft as Kudu runs it (seed 003 "Configs and roles", and the Raft thesis)
-----------------------------------------------------------------------
* Elections: randomised timeouts in [election_ticks, 2 * election_ticks). A follower whose
  timer fires first runs a PRE-election: it asks for votes for term + 1 without changing
  any term, and only if a majority would vote does it bump its term, vote for itself
  (durably) and ask for real votes. A voter refuses a pre-vote and ignores a real vote
  request while it has heard from a live leader within the election timeout (leader
  stickiness), unless the request comes from a leadership transfer. Together these keep a
  partitioned server that rejoins from disrupting a healthy leader.
* Votes: at most one per term, durable (cmeta, atomic replace) before the reply; granted
  only to a candidate whose last OpId is at least ours (the election restriction).
* Replication: AppendEntries with the log-consistency check on (prev_term, prev_index); a
  refusal carries the term at prev_index and the first index of that term, so the leader
  skips a whole divergent term per round trip (fast backtracking).
* Commitment: a new leader appends a no-op in its term; the leader advances its commit
  index only to an entry of its own term that a majority of voters hold (figure 8 of the
  Raft paper: counting replicas never commits an older term's entry by itself). Followers
  learn the commit index from the leader, bounded by what they have verified matches.
* Check-quorum: a leader that has not heard from a majority of voters within an election
  timeout steps down (it may be partitioned away, and reads must not be served from it).
* Membership: one server at a time; a change names the committed config's opid_index as a
  compare-and-set, and is refused while another change is uncommitted or before the
  leader committed an entry of its own term. An accepted change is traced (``config_change``:
  the CAS it was accepted with, the index its entry takes) right before the entry's append.
  A configuration takes effect when appended.
  NON_VOTER members get the log but no vote; with ``promote`` the leader makes them VOTER
  once they have caught up to the commit index.
* Reads: ReadIndex. The leader notes its commit index, confirms it is still leader with a
  heartbeat round acknowledged by a majority, and only then releases the read at that
  index. No clock is trusted (no leases for reads).

Invariants this object keeps (tests/consensus checks them across many cores):
at most one leader per term; log matching; a leader's log contains every committed entry;
no two replicas apply different entries at one index; term and vote never go back.
"""

from __future__ import annotations

import enum
import itertools
import random
from collections.abc import Callable
from typing import Final

import attrs
import msgspec

from revivify.contract.events import (
    ARGS_TYPES,
    AppendArgs,
    CommitArgs,
    ConfigChangeArgs,
    ConfigCommitArgs,
    ElectionArgs,
    EventName,
    LeaderArgs,
    LearnTermArgs,
    StepDownArgs,
    VoteArgs,
)

from . import quorum
from .errors import (
    ALREADY_MEMBER,
    CAS_MISMATCH,
    CHANGE_PENDING,
    LEADER_NOT_READY,
    NO_VOTERS_LEFT,
    NOT_MEMBER,
    REMOVES_LEADER,
    ROLE_UNCHANGED,
    ConfigChangeRefused,
    NotLeader,
    TransferRefused,
)
from .log import RaftLog
from .messages import (
    ENTRY_CONFIG,
    ENTRY_NOOP,
    ENTRY_WRITE,
    NON_VOTER,
    VOTER,
    AppendRequest,
    AppendResponse,
    AppendStatus,
    Config,
    ConfigChange,
    Entry,
    Message,
    Peer,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
    decode_config,
    encode_config,
)
from .progress import CopyExpected, Inflights, Progress, ProgressState


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    # A deleted replica (seed 001 "Future work", as real Kudu does): no log, no data; it
    # keeps its cmeta and last logged OpId and answers votes from them, nothing else.
    TOMBSTONE = "TOMBSTONE"


class RaftProtocolError(Exception):
    """An input the transition table has no row for (a bug in the caller or the table)."""


@attrs.frozen
class Options:
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    pre_vote: bool = True
    check_quorum: bool = True
    max_append_entries: int = 256  # entries per AppendRequest
    # Bytes of entry data per AppendRequest (Kudu's consensus_max_batch_size_bytes): a
    # follower far behind gets its entries in batches that stay well under the RPC frame
    # limit, whatever the entries' size. A single larger entry is still sent, alone.
    max_append_bytes: int = 1 << 20
    # Flow control (progress.py): per peer in REPLICATE, at most this many AppendRequests
    # with entries sent and not yet acknowledged, and (soft cap: one batch may cross it)
    # this many bytes of entry data in them. etcd's MaxInflightMsgs / MaxInflightBytes.
    max_inflight_appends: int = 64
    max_inflight_bytes: int = 16 << 20

    def __attrs_post_init__(self) -> None:
        if self.heartbeat_ticks < 1 or self.election_ticks <= self.heartbeat_ticks:
            raise ValueError("need 1 <= heartbeat_ticks < election_ticks")
        if self.max_inflight_appends < 1 or self.max_inflight_bytes < 1:
            raise ValueError("need at least one append in flight")
        if self.max_append_entries < 1 or self.max_append_bytes < 1:
            raise ValueError("need at least one entry per append")


# The argument records of the facts a Raft core makes (revivify.contract.events).
RaftArgs = (AppendArgs | CommitArgs | ConfigChangeArgs | ConfigCommitArgs | ElectionArgs
            | LeaderArgs | LearnTermArgs | StepDownArgs | VoteArgs)


@attrs.frozen
class RaftFact:
    """A trace fact: the event name, its arguments, and the core's part of the durable
    state after the step (the shell adds the superblock and data blocks)."""

    event: EventName
    args: RaftArgs  # the contract's record of the event's arguments
    term: int
    voted_for: str | None
    config_index: int
    last_term: int
    last_index: int


@attrs.frozen
class Cmeta:
    """What the cmeta file holds: written whole, atomically (write temp, fsync, rename)."""

    term: int
    voted_for: str | None
    committed_config: Config


@attrs.frozen
class Step:
    """One durable change (or none) and the one fact that reports it."""

    fact: RaftFact
    cmeta: Cmeta | None = None  # write the cmeta file with this content
    entries: tuple[Entry, ...] = ()  # append these (the first may overwrite a suffix)


@attrs.frozen
class ReadState:
    request_id: int
    index: int


@attrs.frozen
class Ready:
    """One batch of output (see rule 1-4 of the module docstring; plan.py orders it)."""

    steps: tuple[Step, ...]
    messages: tuple[Message, ...]
    committed: tuple[Entry, ...]
    read_states: tuple[ReadState, ...]
    read_failures: tuple[int, ...]  # ReadIndex requests dropped (leadership lost)
    # after_steps[i]: how many of ``steps`` the core had emitted when it sent messages[i]
    # (what the message may depend on). Non-decreasing, at most len(steps).
    after_steps: tuple[int, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not self.after_steps and self.messages:
            # A Ready built by hand (tests): every message after every step.
            object.__setattr__(self, "after_steps", (len(self.steps),) * len(self.messages))
        assert len(self.after_steps) == len(self.messages), "one position per message"
        bounds = (0, *self.after_steps, len(self.steps))
        assert all(a <= b for a, b in itertools.pairwise(bounds)), \
            f"positions {self.after_steps} of {len(self.steps)} steps"

    def is_empty(self) -> bool:
        return not (self.steps or self.messages or self.committed or self.read_states
                    or self.read_failures)


@attrs.frozen
class PeerStatus:
    uuid: str
    member_type: str
    match: int
    next: int
    state: ProgressState
    copy_expected: CopyExpected | None = None  # set in NEEDS_COPY

    @property
    def needs_copy(self) -> bool:
        """Only a tablet copy can help this peer (``copy_expected`` says what it is)."""
        return self.state is ProgressState.NEEDS_COPY


@attrs.frozen
class Status:
    uuid: str
    role: Role
    term: int
    voted_for: str | None
    leader: str | None
    last_term: int
    last_index: int
    commit_index: int
    applied_index: int
    committed_config: Config
    active_config: Config
    peers: tuple[PeerStatus, ...]  # leader only


@attrs.define
class _ReadRound:
    ctx: int
    index: int
    request_ids: list[int]
    acks: set[str]


# ---------------------------------------------------------------------------------------


class RaftCore:
    """One replica's Raft state machine. See the module docstring."""

    def __init__(
        self,
        *,
        me: str,
        term: int,
        voted_for: str | None,
        committed_config: Config,
        log: RaftLog,
        applied_index: int,
        rng: random.Random,
        options: Options | None = None,
        tombstone: bool = False,
    ) -> None:
        """``tombstone``: a deleted replica; ``log`` is then empty with its base at the
        tombstone's last logged OpId (what its votes compare against)."""
        self.me = me
        self.options = options or Options()
        self.rng = rng
        self.term = term
        self.voted_for = voted_for
        self.log = log
        self.committed_config = committed_config
        # Configurations carried by entries above the committed one, in log order. The
        # active configuration is the last of them (Raft: a config applies once appended).
        self._log_configs: list[Config] = []
        for e in log.slice(committed_config.opid_index + 1, log.last_index):
            if e.kind == ENTRY_CONFIG:
                self._log_configs.append(_config_at(e))
        if applied_index > log.last_index:
            raise ValueError(f"applied index {applied_index} beyond the log ({log.last_index})")
        self.commit_index = applied_index
        self.applied_index = applied_index
        self.role = Role.TOMBSTONE if tombstone else Role.FOLLOWER
        self.leader: str | None = None
        self.election_elapsed = 0
        self.heartbeat_elapsed = 0
        self.randomized_timeout = self._new_timeout()
        self.votes: dict[str, bool] = {}
        self.progress: dict[str, Progress] = {}
        self.transferee: str | None = None
        self.transfer_elapsed = 0
        self.durable_index = log.last_index  # everything handed to the constructor is on disk
        # output being collected for the next ready()
        self._steps: list[Step] = []
        self._messages: list[Message] = []
        self._after_steps: list[int] = []  # per message: len(self._steps) when it was sent
        self._read_states: list[ReadState] = []
        self._read_failures: list[int] = []
        # ReadIndex bookkeeping (leader only)
        self._read_queue: list[int] = []  # waiting for a round
        self._read_rounds: list[_ReadRound] = []
        self._read_ctx = 0
        self._replicate_pending = False  # proposals appended since the last broadcast
        self.dropped: list[str] = []  # why messages were dropped (diagnostics, bounded)
        self.anomalies: list[str] = []  # safety violations observed (tests assert empty)

    # ------------------------------------------------------------------ views

    @property
    def active_config(self) -> Config:
        return self._log_configs[-1] if self._log_configs else self.committed_config

    def voters(self) -> frozenset[str]:
        return self.active_config.voters()

    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def promotable(self) -> bool:
        return self.role is not Role.TOMBSTONE and self.active_config.is_voter(self.me)

    def status(self) -> Status:
        peers: tuple[PeerStatus, ...] = ()
        if self.role is Role.LEADER:
            peers = tuple(
                PeerStatus(p.uuid, p.member_type, self.progress[p.uuid].match,
                           self.progress[p.uuid].next, self.progress[p.uuid].state,
                           self.progress[p.uuid].copy_expected)
                for p in self.active_config.peers if p.uuid in self.progress)
        return Status(self.me, self.role, self.term, self.voted_for, self.leader,
                      self.log.last_term, self.log.last_index, self.commit_index,
                      self.applied_index, self.committed_config, self.active_config, peers)

    def committed_in_term(self) -> bool:
        """The leader has committed an entry of its own term (its no-op at least)."""
        return self.log.term_at(self.commit_index) == self.term

    # ------------------------------------------------------------------ inputs

    def tick(self) -> None:
        self._dispatch(Tick, None)

    def step(self, message: Message) -> None:
        if message.dest != self.me:
            self._drop(f"{type(message).__name__} for {message.dest}, I am {self.me}")
            return
        if message.src == self.me:
            self._drop(f"{type(message).__name__} from myself")
            return
        if not self._term_gate(message):
            return
        self._dispatch(type(message), message)

    def campaign(self) -> None:
        """Start an election now (tests, and an operator's 'elect this replica')."""
        if not self.promotable():
            raise TransferRefused(f"{self.me} is not a voter of the active configuration")
        if self.role is not Role.LEADER:
            self._campaign(pre_vote=self.options.pre_vote, transfer=False)

    def propose(self, data: bytes) -> Entry:
        """Append an application entry; returns it (its OpId identifies the proposal)."""
        self._require_leader()
        return self._append_own(ENTRY_WRITE, data)

    def propose_config_change(self, change: ConfigChange, cas_index: int) -> Entry:
        self._require_leader()
        committed = self.committed_config.opid_index
        if cas_index != committed:
            raise ConfigChangeRefused(
                CAS_MISMATCH, f"the committed config is at index {committed}, the request "
                f"names {cas_index}", committed)
        if self._log_configs:
            raise ConfigChangeRefused(
                CHANGE_PENDING, f"the change at index {self._log_configs[-1].opid_index} is "
                "not committed yet", committed)
        if not self.committed_in_term():
            raise ConfigChangeRefused(
                LEADER_NOT_READY, f"leader of term {self.term} has not committed an entry of "
                "its term yet", committed)
        new_peers = _apply_change(self.active_config, change, self.me, committed)
        index = self.log.last_index + 1
        config = Config(index, new_peers)
        # The acceptance is a step of its own (no durable change), before the entry's
        # append: the trace says which committed config the change was planned on (the
        # spec's config_change: its exact CAS), and the append that follows starts at the
        # config entry (a step in between ends the group commit of earlier proposals).
        self._emit(Step(self._fact("config_change", ConfigChangeArgs(
            cas_index=cas_index, config_index=index, voters=sorted(config.voters())))))
        return self._append_own(ENTRY_CONFIG, encode_config(config))

    def read_index(self, request_id: int) -> None:
        """Ask for a linearizable read point; answered in a later ready().read_states."""
        self._require_leader()
        self._read_queue.append(request_id)

    def transfer_leadership(self, target: str) -> None:
        self._require_leader()
        if target == self.me:
            raise TransferRefused("already the leader")
        if not self.active_config.is_voter(target):
            raise TransferRefused(f"{target} is not a voter of the active configuration")
        self.transferee = target
        self.transfer_elapsed = 0
        pr = self.progress[target]
        if pr.match == self.log.last_index:
            self._send(TimeoutNow(self.me, target, self.term))
        else:
            # Catch it up first (its acknowledgement of our last entry sends TimeoutNow):
            # an append now even if its flow is paused, as a heartbeat would (an empty one
            # probes where its log ends), then whatever its window allows.
            self._send_append(target, heartbeat=True)
            self._replicate_to(target)

    def peer_missing(self, uuid: str) -> None:
        """The peer's server says it does not host this tablet at all (it was never
        created there, fully deleted, or the server was wiped): only a tablet copy can
        help. A leader marks it; anyone else ignores it."""
        pr = self.progress.get(uuid) if self.role is Role.LEADER else None
        if pr is not None and uuid != self.me:
            pr.become_needs_copy("DOES_NOT_EXIST")

    def step_down(self) -> None:
        """Stop leading (an operator's request); stays in the term, votes stay as they are."""
        self._require_leader()
        self._become_follower_same_term("requested")

    # ------------------------------------------------------------------ output

    def _flush_output(self) -> None:
        """What is collected lazily, once per batch: the proposals' broadcast, and the
        ReadIndex rounds of the reads queued since the last batch."""
        if self._replicate_pending:
            self._replicate_pending = False
            if self.role is Role.LEADER:
                self._broadcast_append(heartbeat=False)
        self._start_read_rounds()

    def has_ready(self) -> bool:
        """Whether ``ready()`` would return a non-empty batch. Pure: it changes nothing, so
        a shell may ask any number of times (the driver asks before every wait) without
        moving the core; what ``_flush_output`` would add is predicted, not done."""
        if self._steps or self._messages or self._read_states or self._read_failures \
                or self.commit_index > self.applied_index:
            return True
        if self.role is not Role.LEADER:
            return False
        if self._replicate_pending and any(
                self._append_wanted(pr) for u, pr in self.progress.items() if u != self.me):
            return True
        # A queued read starts a round: heartbeats out, or a release (a single voter).
        return bool(self._read_queue) and self.committed_in_term()

    def ready(self) -> Ready:
        self._flush_output()
        committed: tuple[Entry, ...] = ()
        if self.commit_index > self.applied_index:
            committed = tuple(self.log.slice(self.applied_index + 1, self.commit_index))
            # Only what is in the log can be applied; the log is never compacted past
            # applied_index (compact() bounds it), so the slice is whole.
            assert len(committed) == self.commit_index - self.applied_index
        assert len(self._after_steps) == len(self._messages)
        rd = Ready(tuple(self._steps), tuple(self._messages), committed,
                   tuple(self._read_states), tuple(self._read_failures),
                   tuple(self._after_steps))
        self._steps.clear()
        self._messages.clear()
        self._after_steps.clear()
        self._read_states.clear()
        self._read_failures.clear()
        return rd

    def advance(self, rd: Ready) -> None:
        """The shell executed ``rd``: its steps are durable and its entries applied."""
        # The contract: nothing reached the core between ready() and advance().
        assert not self._steps and not self._messages, "input between ready() and advance()"
        appended = [s.entries[-1].index for s in rd.steps if s.entries]
        if appended:
            # Later steps of the same batch may have truncated below an earlier append.
            self.durable_index = min(appended[-1], self.log.last_index)
        if rd.committed:
            assert rd.committed[0].index == self.applied_index + 1, "applies in index order"
            self.applied_index = rd.committed[-1].index
        if self.role is Role.LEADER and appended:
            # Only now does the leader count itself toward a commit: its appends may have
            # left before its own fsync (plan.py), never its vote for its own entries.
            self.progress[self.me].match = self.durable_index
            self.progress[self.me].next = self.durable_index + 1
            self._maybe_commit()

    def compact(self, up_to: int) -> None:
        """Drop entries up to ``up_to`` from memory (they were flushed to data blocks)."""
        self.log.compact(min(up_to, self.applied_index))
        # Never past what was applied: ready() slices committed entries from the log.
        assert self.log.base_index <= self.applied_index <= self.commit_index

    # ------------------------------------------------------------------ the table

    def _dispatch(self, input_type: type, message: Message | None) -> None:
        row = RAFT_TRANSITIONS.get((self.role, input_type))
        if row is None:
            raise RaftProtocolError(f"no transition for ({self.role.name}, "
                                    f"{input_type.__name__})")
        row.handler(self, message)

    # ---- term handling, common to every role (Raft's "if RPC term > currentTerm")

    def _term_gate(self, m: Message) -> bool:
        """Apply the term rules; False if the message is answered or dropped here."""
        if m.term > self.term:
            if isinstance(m, VoteRequest):
                if m.pre_vote:
                    return True  # a pre-vote never moves a term
                if self._in_lease() and not m.ignore_lease:
                    self._send(VoteResponse(self.me, m.src, self.term, False,
                                            reason="a live leader was heard from recently"))
                    self._drop(f"vote request from {m.src} ignored: leader lease")
                    return False
                return True  # the vote handler folds the term rise into its own step
            if isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                return True  # a granted pre-vote carries the term we would campaign in
            leader = m.src if isinstance(m, AppendRequest) else None
            self._become_follower(m.term, leader)
            return True
        if m.term < self.term:
            if isinstance(m, AppendRequest):
                # Tell a deposed leader about the new term so that it steps down.
                self._send(AppendResponse(self.me, m.src, self.term, AppendStatus.STALE_TERM,
                                          prev_index=m.prev_index,
                                          last_index=self.log.last_index,
                                          detail=f"stale term {m.term} < {self.term}"))
                return False
            if isinstance(m, VoteRequest):
                if not m.pre_vote:
                    self._vote_fact(m, granted=False)
                self._send(VoteResponse(self.me, m.src, self.term, False, pre_vote=m.pre_vote,
                                        reason=f"stale term {m.term} < {self.term}"))
                return False
            if isinstance(m, VoteResponse) and m.pre_vote and m.granted:
                return True  # judged by the pre-candidate against term + 1
            self._drop(f"stale {type(m).__name__} from {m.src} (term {m.term} < {self.term})")
            return False
        return True

    # ---- handlers (one per row kind)

    def _on_tick_follower(self, _: Message | None) -> None:
        self.election_elapsed += 1
        if self.election_elapsed >= self.randomized_timeout and self.promotable():
            self._campaign(pre_vote=self.options.pre_vote, transfer=False)

    def _on_tick_leader(self, _: Message | None) -> None:
        assert self.role is Role.LEADER and self.me in self.progress
        self.heartbeat_elapsed += 1
        self.election_elapsed += 1
        if self.transferee is not None:
            self.transfer_elapsed += 1
            if self.transfer_elapsed >= self.options.election_ticks:
                self.transferee = None  # the transfer timed out: lead on
        if self.election_elapsed >= self.options.election_ticks:
            self.election_elapsed = 0
            if self.options.check_quorum:
                active = {u for u, p in self.progress.items() if p.recent_active} | {self.me}
                for p in self.progress.values():
                    p.recent_active = False
                if not quorum.has_quorum(self.voters(), active):
                    self._become_follower_same_term("check-quorum: no majority heard from")
                    return
        if self.heartbeat_elapsed >= self.options.heartbeat_ticks:
            self.heartbeat_elapsed = 0
            self._broadcast_append(heartbeat=True)

    def _on_vote_request(self, m: Message | None) -> None:
        assert isinstance(m, VoteRequest)
        if m.pre_vote:
            grant = (m.term > self.term and self.log.up_to_date(m.last_term, m.last_index)
                     and (not self._in_lease() or m.ignore_lease))
            self._send(VoteResponse(self.me, m.src, m.term if grant else self.term, grant,
                                    pre_vote=True,
                                    reason="" if grant else self._refusal_reason(m)))
            return
        grant = (m.term >= self.term and self.voted_for in (None, m.src)
                 and self.log.up_to_date(m.last_term, m.last_index))
        if m.term > self.term:  # (the lease was checked by the term gate)
            if self.role is not Role.FOLLOWER:
                self._leave_leadership()
            self._follow()
            self.leader = None
            self.term, self.voted_for = m.term, None
            grant = self.log.up_to_date(m.last_term, m.last_index)
        if grant:
            # At most one vote per term: a vote already given in this term is only ever
            # repeated (a retried request), never changed.
            assert self.voted_for in (None, m.src), f"second vote in term {self.term}"
            self.voted_for = m.src
            self.election_elapsed = 0
        self._vote_fact(m, granted=grant)
        self._send(VoteResponse(self.me, m.src, self.term, grant,
                                reason="" if grant else self._refusal_reason(m)))

    def _on_vote_response(self, m: Message | None) -> None:
        assert isinstance(m, VoteResponse)
        if self.role is Role.PRE_CANDIDATE:
            if not m.pre_vote or (m.granted and m.term != self.term + 1):
                self._drop(f"vote response from {m.src} does not answer my pre-election")
                return
        elif self.role is Role.CANDIDATE:
            if m.pre_vote:
                self._drop(f"late pre-vote response from {m.src}")
                return
        else:
            self._drop(f"vote response from {m.src} while {self.role.name}")
            return
        self.votes[m.src] = m.granted
        result = quorum.vote_result(self.voters(), self.votes)
        if result is quorum.VoteResult.WON:
            if self.role is Role.PRE_CANDIDATE:
                self._campaign(pre_vote=False, transfer=False)
            else:
                self._become_leader()
        elif result is quorum.VoteResult.LOST:
            self.role = Role.FOLLOWER
            self.votes = {}

    def _on_append_request(self, m: Message | None) -> None:
        assert isinstance(m, AppendRequest)
        if self.role is not Role.FOLLOWER:  # a leader of our term exists: follow it
            self.role = Role.FOLLOWER
            self.votes = {}
        self.leader = m.src
        self.election_elapsed = 0
        log = self.log
        if m.prev_index < log.base_index:
            # Entries this node flushed: they are committed, so they match; skip them.
            skip = log.base_index - m.prev_index
            entries = m.entries[skip:]
            prev_index, prev_term = log.base_index, log.base_term
            if len(m.entries) < skip:
                self._send(AppendResponse(self.me, m.src, self.term, AppendStatus.OK,
                                          prev_index=m.prev_index, match_index=log.base_index,
                                          last_index=log.last_index, read_ctx=m.read_ctx))
                return
        else:
            entries, prev_index, prev_term = m.entries, m.prev_index, m.prev_term
        local_prev = log.term_at(prev_index)
        if local_prev is None:  # our log is shorter than prev_index
            assert prev_index > log.last_index
            self._send(AppendResponse(self.me, m.src, self.term, AppendStatus.LOG_MISMATCH,
                                      prev_index=m.prev_index, last_index=log.last_index,
                                      conflict_index=log.last_index + 1, read_ctx=m.read_ctx,
                                      detail=f"no entry at {prev_index}"))
            return
        if local_prev != prev_term:
            # Entries at or below the commit index match every leader's (log matching and
            # leader completeness): a conflict can only be above it.
            assert prev_index > self.commit_index, f"conflict at committed {prev_index}"
            first = log.first_index_of_term(local_prev, prev_index)
            self._send(AppendResponse(self.me, m.src, self.term, AppendStatus.LOG_MISMATCH,
                                      prev_index=m.prev_index, last_index=log.last_index,
                                      conflict_term=local_prev, conflict_index=first,
                                      read_ctx=m.read_ctx,
                                      detail=f"term at {prev_index} is {local_prev}, "
                                             f"not {prev_term}"))
            return
        # Skip the entries we already hold; truncate at the first conflict; append the rest.
        new: list[Entry] = []
        for k, e in enumerate(entries):
            t = log.term_at(e.index)
            if t is None or t != e.term:
                new = list(entries[k:])
                break
        if new:
            if new[0].index <= log.last_index:
                if new[0].index <= self.commit_index:
                    raise AssertionError(
                        f"{self.me}: leader {m.src} would overwrite committed index "
                        f"{new[0].index} (commit {self.commit_index})")
                log.truncate_after(new[0].index - 1)
                while self._log_configs and self._log_configs[-1].opid_index >= new[0].index:
                    self._log_configs.pop()
                self.durable_index = min(self.durable_index, new[0].index - 1)
            log.append(new)
            for e in new:
                if e.kind == ENTRY_CONFIG:
                    self._log_configs.append(_config_at(e))
            self._emit_append(tuple(new))
        match = prev_index + len(entries)
        assert log.last_index >= match and log.term_at(match) is not None
        self._advance_commit(min(m.commit_index, match))
        # Sent after the append step above: plan.py holds it until that step is durable
        # and traced (an acknowledgement promises the entries survive a crash).
        self._send(AppendResponse(self.me, m.src, self.term, AppendStatus.OK,
                                  prev_index=m.prev_index, match_index=match,
                                  last_index=log.last_index, read_ctx=m.read_ctx))

    def _on_append_response(self, m: Message | None) -> None:
        """A peer answered an append: move its Progress (progress.py has the table), then
        send it what it now needs, within its window."""
        assert isinstance(m, AppendResponse)
        pr = self.progress.get(m.src)
        if pr is None or m.src == self.me:
            self._drop(f"append response from {m.src}, not a member")
            return
        pr.recent_active = True
        if m.read_ctx:
            self._ack_reads(m.src, m.read_ctx)
        if m.status is AppendStatus.OK:
            self._on_append_ok(m, pr)
        elif m.status is AppendStatus.STALE_TERM:
            # It answered a request of an earlier term of ours (a response of a higher term
            # never gets here: the term gate made us a follower): nothing to learn.
            self._drop(f"{m.src}: late STALE_TERM answer to an old term's append")
            return
        elif pr.tombstoned_is_stale(m.prev_index) if m.status is AppendStatus.TOMBSTONED \
                else pr.refusal_is_stale(m.prev_index):
            # Overtaken by later messages: acting on it would move `next` back again.
            self._drop(f"{m.src}: stale {m.status.value} for {m.prev_index} "
                       f"({pr.state.name} match={pr.match} next={pr.next})")
            return
        elif m.status is AppendStatus.TOMBSTONED:
            # The peer's replica was deleted: no entry can help it, only a tablet copy.
            pr.become_needs_copy("DELETED")
            return
        else:
            assert m.status is AppendStatus.LOG_MISMATCH
            self._on_append_mismatch(m, pr)
        self._replicate_to(m.src)

    def _on_append_ok(self, m: AppendResponse, pr: Progress) -> None:
        assert m.match_index <= self.log.last_index, "a peer acknowledged beyond our log"
        pr.acknowledged(m.match_index)
        if pr.state is ProgressState.PROBE:
            pr.become_replicate()
        elif pr.state is ProgressState.NEEDS_COPY and \
                self.log.term_at(pr.match) is not None:
            # Its log now continues from a position this log holds (a copy gave it ours).
            pr.become_replicate()
        self._maybe_commit()
        self._maybe_promote(m.src)
        if self.transferee == m.src and pr.match == self.log.last_index:
            self._send(TimeoutNow(self.me, m.src, self.term))

    def _on_append_mismatch(self, m: AppendResponse, pr: Progress) -> None:
        """Fast backtracking: skip the peer's whole conflicting term per round trip."""
        assert m.status is AppendStatus.LOG_MISMATCH
        assert pr.state is not ProgressState.REPLICATE or m.prev_index > pr.match, \
            "a stale refusal got through"
        nxt = m.conflict_index or m.last_index + 1
        if m.conflict_term:
            last_of_term = self.log.last_index_of_term(m.conflict_term)
            if last_of_term is not None:
                nxt = last_of_term + 1
        # Never at or past the refused position (it does not match there), never past our
        # log's end; become_probe keeps it above match.
        nxt = min(nxt, m.prev_index, self.log.last_index + 1)
        if pr.state is ProgressState.NEEDS_COPY \
                and self.log.term_at(max(nxt, pr.match + 1) - 1) is None:
            # It still needs what was compacted here. A LOG_MISMATCH comes only from a
            # live replica with a log, so the next copy must expect READY, whatever was
            # expected before: a first copy that made the replica (DOES_NOT_EXIST) and
            # then fell behind this log's garbage collection would otherwise be asked
            # again as DOES_NOT_EXIST and refused ILLEGAL_STATE for ever.
            pr.become_needs_copy("READY")
            return
        # (In NEEDS_COPY: a copy replaced its log; probe from where it ends.)
        pr.become_probe(nxt)
        self._check_compacted(m.src, pr)

    def _check_compacted(self, uuid: str, pr: Progress) -> bool:
        """If the entries ``uuid`` needs next were compacted here, only a copy can help."""
        assert self.role is Role.LEADER and uuid != self.me
        if pr.state is ProgressState.NEEDS_COPY or self.log.term_at(pr.next - 1) is not None:
            return False
        self._drop(f"{uuid} needs entries from {pr.next}, compacted up to "
                   f"{self.log.base_index}: needs a tablet copy")
        pr.become_needs_copy("READY")
        return True

    def _on_timeout_now(self, m: Message | None) -> None:
        assert isinstance(m, TimeoutNow)
        if self.promotable():
            self._campaign(pre_vote=False, transfer=True)

    def _on_tick_idle(self, _: Message | None) -> None:
        """A tombstone never campaigns; it only counts time since it heard from a leader
        (so that it stops refusing votes once that leader has gone quiet)."""
        self.election_elapsed += 1

    def _on_drop(self, m: Message | None) -> None:
        self._drop(f"{type(m).__name__} ignored while {self.role.name}")

    def _on_second_leader(self, m: Message | None) -> None:
        # Election safety says this cannot happen; never act on it, make it visible.
        assert m is not None
        self._drop(f"AppendRequest from {m.src} claims to lead term {m.term}, which I lead")
        self.anomalies.append(f"two leaders in term {m.term}: {self.me} and {m.src}")

    # ------------------------------------------------------------------ elections

    def _campaign(self, *, pre_vote: bool, transfer: bool) -> None:
        # Only a voter of the active configuration campaigns (callers check promotable):
        # a NON_VOTER or a tombstone winning would lead without being counted.
        assert self.promotable(), f"{self.me} campaigns without being a voter"
        self.election_elapsed = 0
        self.randomized_timeout = self._new_timeout()
        self.leader = None
        self.votes = {self.me: True}
        if pre_vote:
            self.role = Role.PRE_CANDIDATE
            term = self.term + 1
        else:
            self.role = Role.CANDIDATE
            self.term += 1
            self.voted_for = self.me
            self._emit(Step(self._fact("start_election", ElectionArgs(me=self.me)),
                            cmeta=self._cmeta()))
            term = self.term
        if quorum.vote_result(self.voters(), self.votes) is quorum.VoteResult.WON:
            if pre_vote:
                self._campaign(pre_vote=False, transfer=transfer)
            else:
                self._become_leader()
            return
        for uuid in sorted(self.voters() - {self.me}):
            self._send(VoteRequest(self.me, uuid, term, self.log.last_term, self.log.last_index,
                                   pre_vote=pre_vote, ignore_lease=transfer))

    def _become_leader(self) -> None:
        # Won with a vote for itself made durable in this term (start_election's cmeta).
        assert self.role is Role.CANDIDATE and self.voted_for == self.me
        assert self.log.last_term <= self.term, "a log entry from a future term"
        self.role = Role.LEADER
        self.leader = self.me
        self.votes = {}
        self.transferee = None
        self.heartbeat_elapsed = 0
        self.election_elapsed = 0
        # Every peer starts in PROBE at our log's end (where its log ends is not known):
        # the no-op below is the first probe, and refusals walk `next` back from there.
        self.progress = {}
        for p in self.active_config.peers:
            self.progress[p.uuid] = self._new_progress(next_index=self.log.last_index + 1)
        if self.me not in self.progress:  # (a leader always is a voter; see promotable)
            self.progress[self.me] = self._new_progress(next_index=self.log.last_index + 1)
        self.progress[self.me].match = self.durable_index
        self._emit(Step(self._fact("become_leader", LeaderArgs(me=self.me, t=self.term))))
        self._append_own(ENTRY_NOOP, b"")

    def _become_follower(self, term: int, leader: str | None) -> None:
        """A higher term was seen: adopt it (durably), forget the vote, follow."""
        assert term > self.term, f"term would go back from {self.term} to {term}"
        if self.role is not Role.FOLLOWER:
            self._leave_leadership()
        self._follow()
        self.term = term
        self.voted_for = None
        self.leader = leader
        self.votes = {}
        self.election_elapsed = 0
        self._emit(Step(self._fact("learn_term", LearnTermArgs(t=term)), cmeta=self._cmeta()))

    def _follow(self) -> None:
        """Become a follower; a tombstone stays a tombstone (it only ever votes)."""
        if self.role is not Role.TOMBSTONE:
            self.role = Role.FOLLOWER

    def _on_append_tombstoned(self, m: Message | None) -> None:
        # A leader of our term replicates to a deleted replica: tell it so, once per
        # request (it stops sending entries and needs a tablet copy to restore us).
        assert isinstance(m, AppendRequest)
        self.leader = m.src
        self._send(AppendResponse(self.me, m.src, self.term, AppendStatus.TOMBSTONED,
                                  prev_index=m.prev_index, last_index=self.log.last_index,
                                  read_ctx=m.read_ctx, detail="replica deleted"))

    def _become_follower_same_term(self, why: str) -> None:
        # Callers: an operator's step-down and check-quorum, both of a leader.
        assert self.role is Role.LEADER, f"step down while {self.role.name}"
        was_leader = self.role is Role.LEADER
        self._leave_leadership()
        self.role = Role.FOLLOWER
        self.leader = None
        self.election_elapsed = 0
        self.randomized_timeout = self._new_timeout()
        if was_leader:
            self._emit(Step(self._fact("step_down", StepDownArgs(reason=why))))

    def _leave_leadership(self) -> None:
        if self.role is Role.LEADER:
            self._read_failures.extend(self._read_queue)
            for r in self._read_rounds:
                self._read_failures.extend(r.request_ids)
            self._read_queue.clear()
            self._read_rounds.clear()
            self.progress = {}
            self.transferee = None

    def _in_lease(self) -> bool:
        """Heard from a live leader within the minimum election timeout."""
        if self.role is Role.LEADER:
            return True  # a live leader refuses to be disrupted
        return (self.leader is not None
                and self.election_elapsed < self.options.election_ticks)

    def _refusal_reason(self, m: VoteRequest) -> str:
        if not self.log.up_to_date(m.last_term, m.last_index):
            return (f"candidate log ({m.last_term},{m.last_index}) behind mine "
                    f"({self.log.last_term},{self.log.last_index})")
        if self._in_lease():
            return "a live leader was heard from recently"
        if m.term < self.term or (m.pre_vote and m.term <= self.term):
            return f"term {m.term} not above mine ({self.term})"
        return f"already voted for {self.voted_for} in term {self.term}"

    def _new_timeout(self) -> int:
        e = self.options.election_ticks
        return e + self.rng.randrange(e)

    # ------------------------------------------------------------------ replication

    def _require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise NotLeader(self.leader, self.term)
        if self.transferee is not None:
            raise NotLeader(self.transferee, self.term, "leadership transfer in progress")

    def _append_own(self, kind: str, data: bytes) -> Entry:
        # Only a leader appends entries of its own; its term is at least its log's last.
        assert self.role is Role.LEADER and self.log.last_term <= self.term
        entry = Entry(self.term, self.log.last_index + 1, kind, data)  # type: ignore[arg-type]
        self.log.append([entry])
        if kind == ENTRY_CONFIG:
            self._log_configs.append(_config_at(entry))
            for p in self.active_config.peers:
                if p.uuid not in self.progress:  # a new member: probe from its entry
                    self.progress[p.uuid] = self._new_progress(next_index=entry.index)
            for gone in set(self.progress) - set(self.active_config.uuids()) - {self.me}:
                del self.progress[gone]
        self._emit_append((entry,))
        # Replicate once per batch (at ready()), not once per proposal.
        self._replicate_pending = True
        return entry

    def _emit_append(self, entries: tuple[Entry, ...]) -> None:
        """Group commit: appends that continue the previous pending step (nothing else in
        between) join it: one WAL write, one fsync, one log_append fact for the batch."""
        last = self._steps[-1] if self._steps else None
        # prev_term: the term of the entry before the batch in this log (0 before index 1);
        # terms: the batch's entry terms, run-length encoded (contract v3, traces/README.md).
        prev_term = self.log.term_at(entries[0].index - 1)
        if last is not None and last.entries and last.fact.event == "log_append" \
                and last.entries[-1].index == entries[0].index - 1:
            entries = (*last.entries, *entries)
            assert isinstance(last.fact.args, AppendArgs)
            prev_term = last.fact.args.prev_term
            self._steps.pop()
        assert prev_term is not None, "a batch follows an entry this log holds"
        terms: list[list[int]] = []
        for e in entries:
            if terms and terms[-1][0] == e.term:
                terms[-1][1] += 1
            else:
                terms.append([e.term, 1])
        self._emit(Step(self._fact("log_append", AppendArgs(
            first_index=entries[0].index, prev_term=prev_term,
            terms=[(term, count) for term, count in terms], op_term=entries[-1].term,
            op_index=entries[-1].index)), entries=entries))

    def _broadcast_append(self, *, heartbeat: bool) -> None:
        """To every peer: what its window allows (and, for a heartbeat, at least an empty
        append, which also probes and carries the commit index)."""
        assert self.role is Role.LEADER
        for uuid in self.active_config.uuids():
            if uuid == self.me:
                continue
            if heartbeat:
                self._send_append(uuid, heartbeat=True)
            self._replicate_to(uuid)

    def _append_wanted(self, pr: Progress) -> bool:
        """Entries are waiting for this peer and its flow allows sending them now."""
        return (pr.next <= self.log.last_index and not pr.is_paused()
                and self.log.term_at(pr.next - 1) is not None)

    def _replicate_to(self, uuid: str) -> None:
        """Send ``uuid`` appends while entries wait and its window has room (PROBE: one)."""
        pr = self.progress[uuid]
        self._check_compacted(uuid, pr)
        # Each append fills a slot of the window (REPLICATE) or pauses the probe (PROBE),
        # so this ends within the window's size.
        for _ in range(self.options.max_inflight_appends + 1):
            if not self._append_wanted(pr):
                return
            self._send_append(uuid)
        raise AssertionError(f"the window of {uuid} did not bound its appends")

    def _send_append(self, uuid: str, *, heartbeat: bool = False, read_ctx: int = 0) -> None:
        """One AppendRequest to ``uuid``: entries from its ``next`` if its flow allows, else
        none (a heartbeat; only sent as one when ``heartbeat``)."""
        pr = self.progress[uuid]
        assert uuid != self.me and self.role is Role.LEADER
        if read_ctx == 0 and self._read_rounds:
            read_ctx = self._read_rounds[-1].ctx
        if self._check_compacted(uuid, pr) or pr.state is ProgressState.NEEDS_COPY:
            # Keep probing at the end of the log (no entries): once a copy has replaced
            # the peer's log, its answer moves it out of NEEDS_COPY.
            if heartbeat:
                prev = self.log.last_index
                prev_term = self.log.term_at(prev)
                assert prev_term is not None
                self._send(AppendRequest(self.me, uuid, self.term, prev_term=prev_term,
                                         prev_index=prev, entries=(),
                                         commit_index=self.commit_index, read_ctx=read_ctx))
            return
        prev = pr.next - 1
        prev_term = self.log.term_at(prev)
        assert prev_term is not None, "compaction was checked above"
        entries: tuple[Entry, ...] = ()
        if pr.next <= self.log.last_index and not pr.is_paused():
            entries = self._batch(pr.next)
            pr.sent_entries(entries[-1].index, sum(len(e.data) for e in entries))
        elif not heartbeat:
            return
        self._send(AppendRequest(self.me, uuid, self.term, prev_term=prev_term,
                                 prev_index=prev, entries=entries,
                                 commit_index=self.commit_index, read_ctx=read_ctx))

    def _batch(self, start: int) -> tuple[Entry, ...]:
        """The entries from ``start`` for one AppendRequest: at least one, at most
        ``max_append_entries``, and no more data than ``max_append_bytes`` beyond the first."""
        entries = self.log.slice(start, start + self.options.max_append_entries - 1)
        assert entries and entries[0].index == start, f"no entry at {start} to send"
        size, count = 0, 0
        for e in entries:
            size += len(e.data)
            if count and size > self.options.max_append_bytes:
                break
            count += 1
        return tuple(entries[:count])

    def _maybe_commit(self) -> None:
        assert self.role is Role.LEADER
        # The leader counts itself only up to what is durable here (advance()).
        assert self.progress[self.me].match <= self.durable_index
        match = {u: p.match for u, p in self.progress.items()}
        match[self.me] = self.durable_index
        candidate = quorum.committed_index(self.voters(), match)
        # Only an entry of the leader's own term is committed by counting (figure 8).
        if candidate > self.commit_index and self.log.term_at(candidate) == self.term:
            self._advance_commit(candidate)
            if self._read_queue:
                self._start_read_rounds()

    def _advance_commit(self, index: int) -> None:
        if index <= self.commit_index:
            return
        assert index <= self.log.last_index, f"commit {index} beyond the log"
        old = self.commit_index
        self.commit_index = index
        term = self.log.term_at(index)
        assert term is not None
        self._emit(Step(self._fact("commit", CommitArgs(index=index, op_term=term))))
        for e in self.log.slice(old + 1, index):
            if e.kind == ENTRY_CONFIG:
                config = _config_at(e)
                if config.opid_index > self.committed_config.opid_index:
                    self.committed_config = config
                    while self._log_configs and \
                            self._log_configs[0].opid_index <= config.opid_index:
                        self._log_configs.pop(0)
                    self._emit(Step(self._fact("config_commit", ConfigCommitArgs(
                        config_index=e.index, voters=sorted(config.voters()))),
                        cmeta=self._cmeta()))

    def _maybe_promote(self, uuid: str) -> None:
        """Promote a caught-up NON_VOTER that was added with ``promote``."""
        peer = self.active_config.peer(uuid)
        if (peer is None or peer.member_type != NON_VOTER or not peer.promote
                or self._log_configs or not self.committed_in_term()
                or self.transferee is not None):
            return
        if self.progress[uuid].match < self.commit_index:
            return
        promoted = Peer(peer.uuid, peer.address, VOTER, False)
        try:
            self.propose_config_change(ConfigChange("CHANGE_ROLE", promoted),
                                       self.committed_config.opid_index)
        except ConfigChangeRefused as exc:  # raced with another change: retry on next ack
            self._drop(f"promotion of {uuid} deferred: {exc}")

    # ------------------------------------------------------------------ ReadIndex

    def _start_read_rounds(self) -> None:
        if self.role is not Role.LEADER or not self._read_queue:
            return
        if not self.committed_in_term():
            return  # wait for the no-op: until then commit_index may be stale
        self._read_ctx += 1
        rnd = _ReadRound(self._read_ctx, self.commit_index, list(self._read_queue), {self.me})
        self._read_queue.clear()
        self._read_rounds.append(rnd)
        if quorum.has_quorum(self.voters(), rnd.acks):
            self._release_reads()
            return
        for uuid in self.active_config.uuids():
            if uuid != self.me and uuid in self.progress:
                self._send_append(uuid, heartbeat=True, read_ctx=rnd.ctx)

    def _ack_reads(self, uuid: str, ctx: int) -> None:
        for rnd in self._read_rounds:
            if rnd.ctx <= ctx:
                rnd.acks.add(uuid)
        self._release_reads()

    def _release_reads(self) -> None:
        voters = self.voters()
        # A round confirmed by a majority also confirms every earlier round.
        done = [k for k, r in enumerate(self._read_rounds) if quorum.has_quorum(voters, r.acks)]
        if not done:
            return
        upto = done[-1]
        for r in self._read_rounds[: upto + 1]:
            self._read_states.extend(ReadState(rid, r.index) for rid in r.request_ids)
        del self._read_rounds[: upto + 1]

    # ------------------------------------------------------------------ helpers

    def _new_progress(self, *, next_index: int) -> Progress:
        return Progress(Inflights(self.options.max_inflight_appends,
                                  self.options.max_inflight_bytes), match=0, next=next_index)

    def _cmeta(self) -> Cmeta:
        return Cmeta(self.term, self.voted_for, self.committed_config)

    def _fact(self, event: EventName, args: RaftArgs) -> RaftFact:
        # The event's args are the trace contract's record for it, built here where the
        # fact is made (the writer validates the pair again before writing the line).
        assert type(args) is ARGS_TYPES[event], (event, type(args))
        return RaftFact(event, args, self.term, self.voted_for, self.committed_config.opid_index,
                    self.log.last_term, self.log.last_index)

    def _vote_fact(self, m: VoteRequest, *, granted: bool) -> None:
        fact = self._fact("vote_granted" if granted else "vote_denied", VoteArgs(
            candidate=m.src, t=m.term, cand_last_term=m.last_term,
            cand_last_index=m.last_index))
        self._emit(Step(fact, cmeta=self._cmeta()))

    def _emit(self, step: Step) -> None:
        self._steps.append(step)

    def _send(self, m: Message) -> None:
        # Record what the message may depend on: every step emitted so far (plan.py).
        assert m.src == self.me and m.dest != self.me
        self._messages.append(m)
        self._after_steps.append(len(self._steps))

    def _drop(self, why: str) -> None:
        if len(self.dropped) >= 64:
            del self.dropped[:32]
        self.dropped.append(why)


def _config_at(entry: Entry) -> Config:
    config = decode_config(entry.data)
    if config.opid_index != entry.index:
        config = msgspec.structs.replace(config, opid_index=entry.index)
    return config


def _apply_change(config: Config, change: ConfigChange, me: str,
                  committed: int) -> tuple[Peer, ...]:
    peers = list(config.peers)
    current = config.peer(change.peer.uuid)
    if change.kind == "ADD":
        if current is not None:
            raise ConfigChangeRefused(ALREADY_MEMBER, f"{change.peer.uuid} is already a "
                                      f"{current.member_type} member", committed)
        peers.append(change.peer)
    elif change.kind == "REMOVE":
        if current is None:
            raise ConfigChangeRefused(NOT_MEMBER, f"{change.peer.uuid} is not a member",
                                      committed)
        if change.peer.uuid == me:
            raise ConfigChangeRefused(REMOVES_LEADER, f"{me} is the leader: transfer "
                                      "leadership before removing it", committed)
        peers = [p for p in peers if p.uuid != change.peer.uuid]
    else:
        if current is None:
            raise ConfigChangeRefused(NOT_MEMBER, f"{change.peer.uuid} is not a member",
                                      committed)
        if current.member_type == change.peer.member_type:
            raise ConfigChangeRefused(ROLE_UNCHANGED, f"{change.peer.uuid} is already "
                                      f"{current.member_type}", committed)
        if change.peer.uuid == me:
            raise ConfigChangeRefused(REMOVES_LEADER, "the leader cannot change its own "
                                      "role", committed)
        peers = [msgspec.structs.replace(p, member_type=change.peer.member_type,
                                         promote=change.peer.promote)
                 if p.uuid == change.peer.uuid else p for p in peers]
    if not any(p.member_type == VOTER for p in peers):
        raise ConfigChangeRefused(NO_VOTERS_LEFT, "the change would leave no voter", committed)
    return tuple(peers)


# ---------------------------------------------------------------------------------------
# The transition table: (role, input type) -> handler. An input is a message, keyed by its
# class, or a tick (``Tick``); the lifecycle core's table (impl/tserver/manager/core.py) is
# keyed the same way, by the input's class. ``facts`` lists the trace facts a row may emit
# (durable ones first).


@attrs.frozen
class Tick:
    """The input a tick is in the table (``tick()`` takes no value: its handler gets None)."""


@attrs.frozen
class Transition:
    handler: Callable[[RaftCore, Message | None], None]
    facts: tuple[EventName, ...] = ()


_FOLLOWERS: Final = (Role.FOLLOWER, Role.PRE_CANDIDATE, Role.CANDIDATE)
INPUTS: Final[tuple[type, ...]] = (Tick, VoteRequest, VoteResponse, AppendRequest,
                                   AppendResponse, TimeoutNow)

RAFT_TRANSITIONS: dict[tuple[Role, type], Transition] = {}
for _role in _FOLLOWERS:
    RAFT_TRANSITIONS[(_role, Tick)] = Transition(RaftCore._on_tick_follower, ("start_election",))
    RAFT_TRANSITIONS[(_role, VoteRequest)] = Transition(RaftCore._on_vote_request,
                                                     ("vote_granted", "vote_denied"))
    RAFT_TRANSITIONS[(_role, VoteResponse)] = Transition(
        RaftCore._on_vote_response, ("start_election", "become_leader", "log_append"))
    RAFT_TRANSITIONS[(_role, AppendRequest)] = Transition(
        RaftCore._on_append_request, ("log_append", "commit", "config_commit"))
    RAFT_TRANSITIONS[(_role, AppendResponse)] = Transition(RaftCore._on_drop)
    RAFT_TRANSITIONS[(_role, TimeoutNow)] = Transition(RaftCore._on_timeout_now,
                                                    ("start_election",))
RAFT_TRANSITIONS[(Role.LEADER, Tick)] = Transition(RaftCore._on_tick_leader, ("step_down",))
# A leader receives a vote request of its own term only from a stale candidate: refuse.
# One of a higher term passes the term gate only from a leadership transfer (ignore_lease):
# the leader then steps down and may grant it.
RAFT_TRANSITIONS[(Role.LEADER, VoteRequest)] = Transition(RaftCore._on_vote_request,
                                                       ("vote_granted", "vote_denied"))
RAFT_TRANSITIONS[(Role.LEADER, VoteResponse)] = Transition(RaftCore._on_vote_response)
# A caught-up NON_VOTER's promotion is a config change the leader proposes itself.
RAFT_TRANSITIONS[(Role.LEADER, AppendResponse)] = Transition(
    RaftCore._on_append_response, ("commit", "config_commit", "config_change", "log_append"))
RAFT_TRANSITIONS[(Role.LEADER, TimeoutNow)] = Transition(RaftCore._on_drop)
RAFT_TRANSITIONS[(Role.LEADER, AppendRequest)] = Transition(RaftCore._on_second_leader)
# A tombstone votes (from its retained cmeta and last OpId) and does nothing else.
RAFT_TRANSITIONS[(Role.TOMBSTONE, Tick)] = Transition(RaftCore._on_tick_idle)
RAFT_TRANSITIONS[(Role.TOMBSTONE, VoteRequest)] = Transition(RaftCore._on_vote_request,
                                                          ("vote_granted", "vote_denied"))
RAFT_TRANSITIONS[(Role.TOMBSTONE, VoteResponse)] = Transition(RaftCore._on_drop)
RAFT_TRANSITIONS[(Role.TOMBSTONE, AppendRequest)] = Transition(RaftCore._on_append_tombstoned)
RAFT_TRANSITIONS[(Role.TOMBSTONE, AppendResponse)] = Transition(RaftCore._on_drop)
RAFT_TRANSITIONS[(Role.TOMBSTONE, TimeoutNow)] = Transition(RaftCore._on_drop)
del _role

__all__ = [
    "INPUTS", "RAFT_TRANSITIONS", "Cmeta", "Options", "PeerStatus", "RaftCore", "RaftFact",
    "RaftProtocolError", "ReadState", "Ready", "Role", "Status", "Step", "Tick", "Transition",
]
