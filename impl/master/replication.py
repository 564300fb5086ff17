"""Moving replicas: AddReplica, RemoveReplica, MoveReplica and the healing policy (seed 001).

Seed 001 "Master implementation for adding a new peer": the master changes a tablet's
config by sending ONE idempotent RPC to the tablet's leader, ChangeConfig(ADD or REMOVE,
cas_config_index = the committed config's opid_index the master knows). A master with
stale information is refused by the CAS (appendix A: "ChangeConfig is safe due to the use of
CAS on the last change config opid"); the policy simply runs again on fresher records. A new
member is added as a NON_VOTER with ``promote`` (the seed's PRE_VOTER): the leader copies
the tablet to it (auto-vivification by tablet copy, no CreateTablet needed) and makes it a
VOTER once it has caught up. The result comes back in the reports (reports.py records the
new config and tombstones a removed peer with the new config's index as CAS).

What is recorded, and why
-------------------------
A single AddReplica or RemoveReplica stores nothing (an empty write: `Plan.commit` releases
its call at once): its effect is in the tablet's config, which the reports bring back, so a
new leader sees it. A *move* is two changes (add a replacement, wait until it is a VOTER,
remove the old one), and between them the config alone does not say which replica was meant
to go: a tablet with four voters is over-replicated, and a new leader that guessed could
remove the new replica and keep the one being drained. So a move is decided by ONE catalog
write that records it in the tablet's row (`TabletRecord.move`, a `ReplicaMove`), and only
the records drive it from then on: a leader master that takes over mid-move continues it
from the row alone. The write that finds the old replica outside the recorded config clears
the move (done). At most one move per tablet: a tablet never has two changes decided at
once (and the tablet's own leader refuses a second uncommitted change: CHANGE_PENDING).

The policy (`decide`), a pure function of the committed catalog and the tablet servers'
liveness (`ServerView`), evaluated by the ready leader master every background round. Per
RUNNING tablet of a live table:

  1. a move whose source is outside the config is done: clear it (the round's one write);
     so is an automatic move whose source is live again before a replacement was added
     (a server back from a restart or a stall: nothing to move any more);
  2. no move yet:
       a member on a dead server          record move(from = that member)     (one write)
       a member FAILED on a live server   the same: record move(from = it)
       more VOTERs than the replica count record move(from = the surplus voter: a dead one,
                                          else a non-leader on the most loaded server; the
                                          master has no per-replica progress, so "least
                                          caught-up" is approximated by "dead first")
       fewer VOTERs, nobody dead          ADD a live non-member, NON_VOTER + promote
  3. a move recorded (`drive`), with the tablet's leader known and live:
       a NON_VOTER still catching up      wait (its server dead: REMOVE it, it never will)
       the source is a NON_VOTER          REMOVE it (it counts toward no majority)
       enough voters without the source   REMOVE the source, unless it leads (wait for the
                                          leadership to move: `tserver retire` asks it to
                                          step down) or the voters left would not hold a
                                          live majority
       else                               ADD the named destination, or a live non-member
                                          (placement: least loaded), NON_VOTER + promote

So a replacement is always added before the replica it replaces is removed (Kudu's later
"3-4-3" scheme, KUDU-1097): the policy itself never takes a tablet below its replica count
of voters, nor below a live majority. A server is *dead* when silent longer than the
master's timeout; one the master has not heard from is *unknown* until the master has run
that long (a restarted master does not take every server for dead), and a tablet with an
unknown or dead leader waits for a live leader's report.

A FAILED replica on a live server (its disk failed, its startup or store failed: the
server keeps it as evidence and reports it FAILED) is healed like a member on a dead
server, replica by replica (Kudu's master replaces it the same way): it counts toward no
live majority, it is the first choice of an over-replicated tablet's removal, a NON_VOTER
that FAILED never catches up (REMOVE it), and an automatic move off a FAILED replica is
not abandoned because its server is live. ``ServerView.failed`` holds the (tablet, server)
pairs the leader master last saw reported FAILED: soft state, from reports (a new leader
gets a full report from every server, KUDU-1374, so it learns them again), while the move
it leads to is recorded durably as any other.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence

import attrs

from revivify.impl.consensus.messages import NON_VOTER, VOTER, ConfigChange, Peer
from revivify.impl.tserver.master_api import TabletReport

from .calls import change_config
from .catalog import (
    Catalog,
    CatalogWrite,
    ReplicaMove,
    TableRecord,
    TabletRecord,
    TabletState,
    evolve,
    table_key,
    tablet_key,
)
from .errors import IllegalState, InvalidArgument, MasterError, NotEnoughServers, NotFound
from .operations import Plan, make_plan
from .placement import Candidate, choose

# ---------------------------------------------------------------------------- replies


@attrs.frozen
class ConfigChangeSent:
    tablet_id: str
    leader: str | None  # None: nothing sent, the change was already made
    change: ConfigChange | None
    cas_config_index: int
    already_done: bool = False


@attrs.frozen
class MoveRecorded:
    tablet_id: str
    from_uuid: str
    to_uuid: str | None
    already_recorded: bool = False  # a retry of the same move: nothing written
    done: bool = False  # the source is no longer a member (a retry after it finished)


# ---------------------------------------------------------------------------- helpers


def _changeable(catalog: Catalog, tablet_id: str, *,
                need_leader: bool = True) -> TabletRecord | MasterError:
    tablet = catalog.tablets.get(tablet_id)
    if tablet is None:
        return NotFound("tablet", tablet_id)
    table = catalog.tables[tablet.table_id]
    if tablet.state is not TabletState.RUNNING or not table.live:
        return IllegalState(f"tablet {tablet_id} is {tablet.state.value} in a "
                            f"{table.state.value} table: only a RUNNING tablet's config changes")
    if need_leader and tablet.consensus.leader is None:
        return IllegalState(f"tablet {tablet_id} has no known leader in term "
                            f"{tablet.consensus.term}; retry once one reports")
    return tablet


def _reads(tablet: TabletRecord, table: TableRecord | None = None) -> dict[bytes, int]:
    reads = {tablet_key(tablet.tablet_id): tablet.version}
    if table is not None:
        reads[table_key(table.table_id)] = table.version
    return reads


def _change_plan(tablet: TabletRecord, change: ConfigChange,
                 why: str) -> Plan[ConfigChangeSent]:
    """An empty write and ONE ChangeConfig to the recorded leader, CAS = the recorded
    config's index. The shell checks freshness first (the tablet row was read)."""
    leader = tablet.consensus.leader
    assert leader is not None
    cas = tablet.consensus.config.opid_index
    call = change_config(leader, tablet.tablet_id, change, cas, why)
    return make_plan("change_config", CatalogWrite(),
                     ConfigChangeSent(tablet.tablet_id, leader, change, cas), (call,),
                     tables=(), tablets=(), reads=_reads(tablet))


def _nothing_to_do(tablet: TabletRecord) -> Plan[ConfigChangeSent]:
    return make_plan("change_config", CatalogWrite(),
                     ConfigChangeSent(tablet.tablet_id, None, None,
                                      tablet.consensus.config.opid_index, already_done=True),
                     (), tables=(), tablets=(), reads=_reads(tablet))


def _new_peer(server: Candidate, voter: bool) -> Peer:
    return Peer(server.uuid, server.address, VOTER) if voter else \
        Peer(server.uuid, server.address, NON_VOTER, promote=True)


def majority(voters: int) -> int:
    return voters // 2 + 1


# ---------------------------------------------------------------------------- operations


def plan_add_replica(catalog: Catalog, tablet_id: str, server: Candidate, *,
                     voter: bool = False) -> Plan[ConfigChangeSent] | MasterError:
    """AddReplica(tablet, server, member type): NON_VOTER with promote by default
    (PRE_VOTER), or a VOTER at once. ``server`` must be live (the caller takes it from the
    live map). Idempotent: a server already a member of that type is an empty plan."""
    tablet = _changeable(catalog, tablet_id)
    if isinstance(tablet, MasterError):
        return tablet
    current = tablet.consensus.config.peer(server.uuid)
    if current is not None:
        if current.member_type == VOTER or not voter:
            return _nothing_to_do(tablet)
        return InvalidArgument(f"{server.uuid} is a NON_VOTER of tablet {tablet_id}; it is "
                               "promoted by its leader once it has caught up")
    return _change_plan(tablet, ConfigChange("ADD", _new_peer(server, voter)), "add replica")


def plan_remove_replica(catalog: Catalog, tablet_id: str,
                        uuid: str) -> Plan[ConfigChangeSent] | MasterError:
    """RemoveReplica(tablet, server). The leader itself is not removed (ask it to step down
    first); neither is the last voter. Idempotent: a non-member is an empty plan."""
    tablet = _changeable(catalog, tablet_id)
    if isinstance(tablet, MasterError):
        return tablet
    peer = tablet.consensus.config.peer(uuid)
    if peer is None:
        return _nothing_to_do(tablet)
    if uuid == tablet.consensus.leader:
        return IllegalState(f"{uuid} leads tablet {tablet_id}: transfer leadership first")
    if tablet.consensus.config.voters() == {uuid}:
        return IllegalState(f"{uuid} is the last voter of tablet {tablet_id}")
    return _change_plan(tablet, ConfigChange("REMOVE", peer), "remove replica")


def plan_move_replica(catalog: Catalog, tablet_id: str, from_uuid: str,
                      to: Candidate | None, *, reason: str = "move replica"
                      ) -> Plan[MoveRecorded] | MasterError:
    """MoveReplica(tablet, from, to): ONE write recording the move in the tablet's row
    (module docstring); the policy drives it. ``to``: a live server (None: placement
    chooses). Idempotent: the same move again writes nothing; after it finished (``from``
    gone, ``to`` a member) it answers done."""
    tablet = _changeable(catalog, tablet_id, need_leader=False)
    if isinstance(tablet, MasterError):
        return tablet
    to_uuid = None if to is None else to.uuid
    if to_uuid == from_uuid:
        return InvalidArgument("a move needs two different servers")
    config = tablet.consensus.config
    reads = _reads(tablet)
    existing = tablet.move
    if existing is not None:
        if existing.from_uuid == from_uuid and (to_uuid is None
                                                or existing.to_uuid == to_uuid):
            return make_plan("move_replica", CatalogWrite(),
                             MoveRecorded(tablet_id, from_uuid, existing.to_uuid,
                                          already_recorded=True), (),
                             tables=(), tablets=(), reads=reads)
        return IllegalState(f"tablet {tablet_id} is already moving a replica off "
                            f"{existing.from_uuid}; retry once that move is done")
    if config.peer(from_uuid) is None:
        if to_uuid is None or config.peer(to_uuid) is not None:
            return make_plan("move_replica", CatalogWrite(),
                             MoveRecorded(tablet_id, from_uuid, to_uuid, done=True), (),
                             tables=(), tablets=(), reads=reads)
        return InvalidArgument(f"{from_uuid} is not a member of tablet {tablet_id}")
    moving = evolve(tablet, move=ReplicaMove(from_uuid, to_uuid, reason))
    return make_plan("move_replica", CatalogWrite(tablets=(moving,)),
                     MoveRecorded(tablet_id, from_uuid, to_uuid), (),
                     tables=(), tablets=(tablet_id,), reads=reads)


# ---------------------------------------------------------------------------- the policy


@attrs.frozen
class ServerView:
    """The tablet servers as the shell's map sees them at one instant. A uuid in neither
    set is unknown (not heard from, and the master has not run long enough to call it
    dead): the policy decides nothing that depends on it."""

    live: frozenset[str]
    dead: frozenset[str]
    candidates: tuple[Candidate, ...]  # the live servers that may receive a replica
    # (tablet id, server uuid) of replicas last reported FAILED (module docstring).
    failed: frozenset[tuple[str, str]] = frozenset()

    def __attrs_post_init__(self) -> None:
        assert not self.live & self.dead
        assert {c.uuid for c in self.candidates} <= self.live

    def healthy(self, tablet_id: str, uuid: str) -> bool:
        """The replica of ``tablet_id`` on ``uuid`` is on a live server and not FAILED."""
        return uuid in self.live and (tablet_id, uuid) not in self.failed

    def lost(self, tablet_id: str, uuid: str) -> bool:
        """The replica is gone for good: its server dead, or the replica FAILED there."""
        return uuid in self.dead or (tablet_id, uuid) in self.failed


@attrs.frozen
class Healing:
    """One round's decisions: ``write`` the ONE catalog write of the round (moves recorded,
    finished moves cleared) or None, ``changes`` the ChangeConfig plans (empty writes, one
    per tablet at most, none for a tablet the write touches), ``waiting`` why a tablet that
    needs something got nothing this round (logs, tests)."""

    write: Plan[tuple[str, ...]] | None
    changes: tuple[Plan[ConfigChangeSent], ...]
    waiting: Mapping[str, str]


def _surplus_victim(tablet: TabletRecord, servers: ServerView,
                    load: Mapping[str, int]) -> str | None:
    """The voter an over-replicated tablet loses: a dead one, else a non-leader on the most
    loaded server (ties: the highest uuid, deterministic)."""
    voters = sorted(tablet.consensus.config.voters())
    lost = [v for v in voters if servers.lost(tablet.tablet_id, v)]
    if lost:
        return lost[0]
    others = [v for v in voters if v != tablet.consensus.leader]
    if not others:
        return None
    return max(others, key=lambda v: (load.get(v, 0), v))


def _new_move(tablet: TabletRecord, table: TableRecord, servers: ServerView,
              load: Mapping[str, int]) -> ReplicaMove | None:
    """The move a tablet without one needs (policy step 2), if any."""
    config = tablet.consensus.config
    tablet_id = tablet.tablet_id
    if any(p.member_type == NON_VOTER for p in config.peers
           if not servers.lost(tablet_id, p.uuid)):
        return None  # a member catching up: the last change is not finished
    dead = sorted(p.uuid for p in config.peers if p.uuid in servers.dead)
    if dead:
        return ReplicaMove(dead[0], None, f"tablet server {dead[0]} is dead",
                           automatic=True)
    failed = sorted(p.uuid for p in config.peers if (tablet_id, p.uuid) in servers.failed)
    if failed:
        return ReplicaMove(failed[0], None, f"the replica on {failed[0]} FAILED",
                           automatic=True)
    if len(config.voters()) > table.num_replicas:
        victim = _surplus_victim(tablet, servers, load)
        if victim is not None:
            return ReplicaMove(victim, None, "over-replicated", automatic=True)
    return None


def _abandoned(tablet: TabletRecord, table: TableRecord, move: ReplicaMove,
               servers: ServerView) -> bool:
    """An automatic move whose source is live again before its replacement was added (a
    server back from a restart or a stall): nothing to move any more. An operator's move
    (MoveReplica, retire) is never abandoned."""
    config = tablet.consensus.config
    return move.automatic and servers.healthy(tablet.tablet_id, move.from_uuid) \
        and not any(p.member_type == NON_VOTER for p in config.peers) \
        and len(config.voters() - {move.from_uuid}) < table.num_replicas


def drive(tablet: TabletRecord, table: TableRecord, servers: ServerView,
          load: dict[str, int], rng: random.Random
          ) -> Plan[ConfigChangeSent] | str | None:
    """The next change of a tablet (policy steps 2's ADD and 3), or why it waits (a
    string), or None when it needs nothing."""
    config = tablet.consensus.config
    leader = tablet.consensus.leader
    move = tablet.move
    voters = config.voters()
    if move is None and len(voters) >= table.num_replicas:
        return None
    if leader is None or not servers.healthy(tablet.tablet_id, leader):
        return "no live leader known"
    if not all(p.uuid in servers.live or p.uuid in servers.dead for p in config.peers):
        return "a member's liveness is not known yet"
    source = None if move is None else move.from_uuid
    for member in config.peers:
        if member.member_type == NON_VOTER and member.uuid != source:
            if servers.lost(tablet.tablet_id, member.uuid):
                return _change_plan(tablet, ConfigChange("REMOVE", member),
                                    "a NON_VOTER dead or FAILED never catches up")
            return f"{member.uuid} is catching up"
    if move is not None:
        peer = config.peer(move.from_uuid)
        assert peer is not None, "a finished move is cleared, not driven"
        if peer.member_type == NON_VOTER:
            return _change_plan(tablet, ConfigChange("REMOVE", peer), move.reason)
        remaining = voters - {peer.uuid}
        if len(remaining) >= table.num_replicas:
            if peer.uuid == leader:
                return f"{peer.uuid} leads: waiting for the leadership to move"
            if sum(servers.healthy(tablet.tablet_id, v) for v in remaining) \
                    < majority(len(remaining)):
                return "removing it would leave no live majority"
            return _change_plan(tablet, ConfigChange("REMOVE", peer), move.reason)
    else:
        remaining = voters
    if len(remaining) >= table.num_replicas:
        return None
    # ADD: the named destination, or the least-loaded live server that is not a member.
    exclude = set(config.uuids()) | ({source} if source else set())
    if move is not None and move.to_uuid is not None:
        named = next((c for c in servers.candidates if c.uuid == move.to_uuid), None)
        if named is None:
            return f"the destination {move.to_uuid} is not live"
        chosen = [named]
    else:
        picked = choose(servers.candidates, load, 1, rng, exclude=exclude)
        if isinstance(picked, NotEnoughServers):
            return "no live server to add"
        chosen = picked
    load[chosen[0].uuid] = load.get(chosen[0].uuid, 0) + 1
    why = "under-replicated" if move is None else move.reason
    return _change_plan(tablet, ConfigChange("ADD", _new_peer(chosen[0], voter=False)), why)


def plan_record_moves(catalog: Catalog, moves: Mapping[str, ReplicaMove | None]
                      ) -> Plan[tuple[str, ...]] | MasterError:
    """ONE write: each tablet's move set (or cleared, None). Refused if a tablet changed so
    that the decision no longer holds (the shell re-plans anyway: it read the rows)."""
    written: list[TabletRecord] = []
    reads: dict[bytes, int] = {}
    for tablet_id in sorted(moves):
        tablet = catalog.tablets.get(tablet_id)
        if tablet is None:
            return NotFound("tablet", tablet_id)
        written.append(evolve(tablet, move=moves[tablet_id]))
        reads.update(_reads(tablet))
    if not written:
        return InvalidArgument("no move to record")
    return make_plan("record_moves", CatalogWrite(tablets=tuple(written)),
                     tuple(sorted(moves)), (), tables=(), tablets=sorted(moves), reads=reads)


def decide(catalog: Catalog, servers: ServerView, rng: random.Random) -> Healing:
    """The policy (module docstring): one round's write and changes, from committed records
    and liveness alone."""
    load = catalog.replica_counts()
    moves: dict[str, ReplicaMove | None] = {}
    changes: list[Plan[ConfigChangeSent]] = []
    waiting: dict[str, str] = {}
    for tablet_id in sorted(catalog.tablets):
        tablet = catalog.tablets[tablet_id]
        table = catalog.tables[tablet.table_id]
        if tablet.state is not TabletState.RUNNING or not table.live:
            continue
        config = tablet.consensus.config
        if tablet.move is not None and config.peer(tablet.move.from_uuid) is None:
            moves[tablet_id] = None  # done: cleared in this round's write
            continue
        if tablet.move is not None and _abandoned(tablet, table, tablet.move, servers):
            moves[tablet_id] = None  # its reason went away: cleared, nothing was added
            continue
        if tablet.move is None:
            new = _new_move(tablet, table, servers, load)
            if new is not None:
                moves[tablet_id] = new  # recorded first; driven from the next round on
                continue
        decided = drive(tablet, table, servers, load, rng)
        if isinstance(decided, str):
            waiting[tablet_id] = decided
        elif decided is not None:
            changes.append(decided)
    write = plan_record_moves(catalog, moves) if moves else None
    assert not isinstance(write, MasterError)
    return Healing(write, tuple(changes), waiting)


def failed_after_report(previous: frozenset[str], report: TabletReport) -> frozenset[str]:
    """The tablets a server holds FAILED after ``report`` (``previous``: before it). A full
    report says everything; an incremental one only about the tablets it names (a tablet
    left out did not change)."""
    failed = set() if report.full else set(previous)
    for replica in report.replicas:
        if replica.state == "FAILED":
            failed.add(replica.tablet_id)
        else:
            failed.discard(replica.tablet_id)
    return frozenset(failed)


def server_view(live: Collection[str], dead: Collection[str],
                candidates: Sequence[Candidate],
                failed: Collection[tuple[str, str]] = ()) -> ServerView:
    return ServerView(frozenset(live), frozenset(dead), tuple(candidates), frozenset(failed))


__all__ = [
    "ConfigChangeSent",
    "Healing",
    "MoveRecorded",
    "ServerView",
    "decide",
    "drive",
    "failed_after_report",
    "majority",
    "plan_add_replica",
    "plan_move_replica",
    "plan_record_moves",
    "plan_remove_replica",
    "server_view",
]
