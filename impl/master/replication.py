"""Moving replicas: AddReplica, RemoveReplica, and the re-replication policy (seed 001).

Seed 001 "Master implementation for adding a new peer": the master changes a tablet's
config by sending ONE idempotent RPC to the tablet's leader, ChangeConfig(ADD or REMOVE,
cas_config_index = the committed config's opid_index the master knows), and stores nothing
about it: the result comes back in the next reports (reports.py records the new config and
tombstones a removed peer). A master with stale information is refused by the CAS (appendix
A: "ChangeConfig is safe due to the use of CAS on the last change config opid"); the policy
simply runs again on fresher records. A new member is added as a NON_VOTER with ``promote``
(the seed's PRE_VOTER): the leader copies the tablet to it (auto-vivification by tablet
copy, no CreateTablet needed) and makes it a VOTER once it has caught up.

So these plans have an empty catalog write: `Plan.commit` releases their call at once, on
the snapshot they were planned on (their ``reads`` let the shell check freshness first).

The policy (`rereplication_calls`), evaluated by the leader in the background over the
committed records and the live servers, one change per tablet at a time. It is Kudu's later
"3-4-3" scheme (KUDU-1097): a replacement is added before the dead replica is removed, so a
tablet never runs on fewer voters than its replica count because of the policy itself.

  1. only a RUNNING tablet of a live table, with a known leader and no NON_VOTER still
     catching up (a change in progress), is considered;
  2. fewer VOTERs than the table's replica count: ADD the least-loaded live server that is
     not a member, as NON_VOTER with promote;
  3. a VOTER other than the leader on a dead server: if there are more voters than the
     replica count (its replacement was promoted), REMOVE it; else ADD a replacement as in 2.

This is what makes the masters move replicas after a disk loss by themselves: the wiped
server comes back under a new UUID, its old UUID goes dead, the policy removes it and adds
a live server, and the leader copies the tablet there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import attrs

from revivify.impl.consensus.messages import NON_VOTER, VOTER, ConfigChange, Peer

from .calls import TabletServerCall, change_config
from .catalog import Catalog, CatalogWrite, TabletRecord, TabletState, tablet_key
from .errors import IllegalState, InvalidArgument, MasterError, NotEnoughServers, NotFound
from .operations import Plan, make_plan
from .placement import Candidate, choose


@attrs.frozen
class ConfigChangeSent:
    tablet_id: str
    leader: str
    change: ConfigChange
    cas_config_index: int


def _changeable(catalog: Catalog, tablet_id: str) -> TabletRecord | MasterError:
    tablet = catalog.tablets.get(tablet_id)
    if tablet is None:
        return NotFound("tablet", tablet_id)
    table = catalog.tables[tablet.table_id]
    if tablet.state is not TabletState.RUNNING or not table.live:
        return IllegalState(f"tablet {tablet_id} is {tablet.state.value} in a "
                            f"{table.state.value} table: only a RUNNING tablet's config changes")
    if tablet.consensus.leader is None:
        return IllegalState(f"tablet {tablet_id} has no known leader in term "
                            f"{tablet.consensus.term}; retry once one reports")
    return tablet


def _change_plan(tablet: TabletRecord, change: ConfigChange,
                 why: str) -> Plan[ConfigChangeSent]:
    leader = tablet.consensus.leader
    assert leader is not None
    cas = tablet.consensus.config.opid_index
    call = change_config(leader, tablet.tablet_id, change, cas, why)
    return make_plan("change_config", CatalogWrite(),
                     ConfigChangeSent(tablet.tablet_id, leader, change, cas), (call,),
                     tables=(), tablets=(), reads={tablet_key(tablet.tablet_id): tablet.version})


def plan_add_replica(catalog: Catalog, tablet_id: str, server: Candidate, *,
                     voter: bool = False) -> Plan[ConfigChangeSent] | MasterError:
    """AddReplica(tablet, server, role): NON_VOTER with promote by default (PRE_VOTER), or
    a VOTER at once. ``server`` must be live (the caller takes it from the live map)."""
    tablet = _changeable(catalog, tablet_id)
    if isinstance(tablet, MasterError):
        return tablet
    if tablet.is_member(server.uuid):
        return InvalidArgument(f"{server.uuid} is already a member of tablet {tablet_id}")
    peer = Peer(server.uuid, server.address, VOTER) if voter else \
        Peer(server.uuid, server.address, NON_VOTER, promote=True)
    return _change_plan(tablet, ConfigChange("ADD", peer), "add replica")


def plan_remove_replica(catalog: Catalog, tablet_id: str,
                        uuid: str) -> Plan[ConfigChangeSent] | MasterError:
    """RemoveReplica(tablet, server). The leader itself is not removed (ask it to step down
    first); neither is the last voter."""
    tablet = _changeable(catalog, tablet_id)
    if isinstance(tablet, MasterError):
        return tablet
    peer = tablet.consensus.config.peer(uuid)
    if peer is None:
        return InvalidArgument(f"{uuid} is not a member of tablet {tablet_id}")
    if uuid == tablet.consensus.leader:
        return IllegalState(f"{uuid} leads tablet {tablet_id}: transfer leadership first")
    if tablet.consensus.config.voters() == {uuid}:
        return IllegalState(f"{uuid} is the last voter of tablet {tablet_id}")
    return _change_plan(tablet, ConfigChange("REMOVE", peer), "remove replica")


def rereplication_calls(catalog: Catalog, *, live: Callable[[str], bool],
                        candidates: Sequence[Candidate],
                        rng: random.Random) -> tuple[TabletServerCall, ...]:
    """One ChangeConfig per tablet that needs one (module docstring), from committed
    records only; send them as they are (each is fenced by its CAS)."""
    load = catalog.replica_counts()
    calls: list[TabletServerCall] = []
    for tablet_id in sorted(catalog.tablets):
        tablet = catalog.tablets[tablet_id]
        table = catalog.tables[tablet.table_id]
        config = tablet.consensus.config
        if tablet.state is not TabletState.RUNNING or not table.live \
                or tablet.consensus.leader is None \
                or any(p.member_type == NON_VOTER for p in config.peers):
            continue
        voters = sorted(config.voters())
        dead = [v for v in voters if not live(v) and v != tablet.consensus.leader]
        plan: Plan[ConfigChangeSent] | MasterError | None = None
        if dead and len(voters) > table.num_replicas:
            plan = plan_remove_replica(catalog, tablet_id, dead[0])
        elif dead or len(voters) < table.num_replicas:
            chosen = choose(candidates, load, 1, rng, exclude=config.uuids())
            if isinstance(chosen, NotEnoughServers):
                continue  # no live server to add: try again on a later round
            plan = plan_add_replica(catalog, tablet_id, chosen[0])
            load[chosen[0].uuid] = load.get(chosen[0].uuid, 0) + 1
        if isinstance(plan, Plan):
            calls.extend(plan.commit(catalog).calls)
    return tuple(calls)


__all__ = [
    "ConfigChangeSent",
    "plan_add_replica",
    "plan_remove_replica",
    "rereplication_calls",
]
