"""ksck's core: what ``revivify ksck`` asks the cluster and the verdict it gives, shared
by the command (impl/cli/ksck.py, which prints it) and the master's ``/ksck`` page
(impl/web), so the page and the command cannot disagree.

What it asks (existing RPCs only, through impl/client):

1. every master, ``Master.Status``: reachable?, role, term, the leader it knows, ready, and
   the catalog's voters (its committed config); the masters must agree on the leader, the
   term and the voters;
2. the leader master: the tablet servers it hears from (live or dead by their heartbeats),
   the tables, and each table's tablet locations (the catalog's record of every tablet's
   replicas);
3. every tablet server, once (``Admin.Status``): does it answer itself, and each of its
   replicas' own state (lifecycle state, role, term, committed index, committed config
   index, active config).

What it checks, per tablet (the catalog's replicas against what the replicas say):

    UNAVAILABLE         fewer live voters than a majority of the catalog's voters
    CONSENSUS_MISMATCH  a running replica's config differs from the catalog's record, or
                        two replicas lead in the same term
    UNDER_REPLICATED    fewer live voters than the replica count
    RECOVERING          no leader (yet), or the tablet not RUNNING in the catalog
    HEALTHY             none of the above

the first that holds, in that order. A live voter is a VOTER in the catalog whose server
answers and whose replica is RUNNING there. The replica count is the table's
(``num_replicas`` in the locations; the catalog's voters for the tablet from a master that
does not say). A replica is *lagging* when its committed index is behind the leader's: a
warning, not a problem (every follower is a little behind under writes). A replica that is
a tombstone where the catalog places a live one is *tombstoned* and is not a live voter;
tombstones on other servers are listed, not problems. A replica move the masters are
making (``moving_from``) is shown with the tablet.

The cluster is healthy when every master answers, they agree on one leader, on its term
and on the catalog's voters, a master is the ready leader, every tablet server is live and
answers (a dead one that the catalog places no replica on is a warning, naming ``tserver
unregister``), and every tablet is HEALTHY. Exit 0 healthy; 1 not (every problem listed, then the
summary line); 2 bad usage, or no master could be reached.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import trio

from revivify.impl.master import api
from revivify.impl.tserver.api import ReplicaInfo, ServerStatus

from .admin import server_status
from .documents import member_role, peer_doc
from .errors import ClientError, Rejected
from .master import master_call, master_status
from .options import ClientOptions

PER_CALL_SECONDS = 5.0  # one server's answer to one status call, at most
VOTER = "VOTER"
LEADER = "LEADER"
RUNNING = "RUNNING"
TOMBSTONED = "TOMBSTONED"

HEALTHY = "HEALTHY"
RECOVERING = "RECOVERING"
UNDER_REPLICATED = "UNDER_REPLICATED"
CONSENSUS_MISMATCH = "CONSENSUS_MISMATCH"
UNAVAILABLE = "UNAVAILABLE"

T = TypeVar("T")


class NoMaster(ClientError):
    """No master answered (exit 2)."""


# ---------------------------------------------------------------------------- gathering


@attrs.frozen
class Answer:
    """One server's answer to one call, or why there is none."""

    value: Any
    error: str | None


async def _ask(call: Callable[[], Awaitable[T]], seconds: float) -> Answer:
    with trio.move_on_after(seconds):
        try:
            return Answer(await call(), None)
        except Exception as exc:  # an answer too: it failed, and why
            return Answer(None, f"{type(exc).__name__}: {exc}" if not str(exc)
                          else str(exc))
    return Answer(None, f"no answer within {seconds:g}s")


async def _ask_all(calls: dict[str, Callable[[], Awaitable[T]]], seconds: float
                   ) -> dict[str, Answer]:
    """Every call at once; each one's Answer by its key."""
    answers: dict[str, Answer] = {}

    async def one(key: str, call: Callable[[], Awaitable[T]]) -> None:
        answers[key] = await _ask(call, seconds)

    async with trio.open_nursery() as nursery:
        for key, call in calls.items():
            nursery.start_soon(one, key, call)
    return {key: answers[key] for key in calls}  # in the order asked, not answered


@attrs.frozen
class Facts:
    """Everything ksck asked and what came back."""

    masters: dict[str, Answer]  # address -> MasterStatus
    tservers: list[api.TabletServerEntry] | None  # None: the leader master did not say
    tables: list[tuple[api.TableInfo, api.TableLocationsReply | None, str | None]]
    servers: dict[str, Answer]  # tablet server address -> ServerStatus
    catalog_error: str | None


async def gather(masters: list[str], deadline: float) -> Facts:
    per_call = min(PER_CALL_SECONDS, deadline)
    statuses = await _ask_all(
        {m: (lambda m=m: master_status(m)) for m in masters}, per_call)  # type: ignore[misc]
    if not any(a.error is None for a in statuses.values()):
        raise NoMaster("no master could be reached: " + "; ".join(
            a.error if a.error.startswith(m) else f"{m}: {a.error}"
            for m, a in statuses.items() if a.error is not None))
    ready = [m for m, a in statuses.items() if a.error is None and a.value.ready]
    order = ready + [m for m in masters if m not in ready]
    options = ClientOptions(deadline=max(1.0, deadline - per_call))
    tservers: list[api.TabletServerEntry] | None = None
    tables: list[tuple[api.TableInfo, api.TableLocationsReply | None, str | None]] = []
    catalog_error: str | None = None
    try:
        tservers = list((await master_call(order, api.MASTER_LIST_TSERVERS, api.Empty(),
                                           api.TabletServerList, options)).tservers)
        listed = await master_call(order, api.MASTER_LIST_TABLES, api.Empty(), api.TableList,
                                   options)
        for table in listed.tables:
            try:
                where = await master_call(order, api.MASTER_TABLE_LOCATIONS,
                                          api.TableName(table.name), api.TableLocationsReply,
                                          options)
            except Rejected as exc:
                if isinstance(exc.error, api.Refused) and exc.error.reason == "NOT_FOUND":
                    continue  # deleted since the list: not a problem of the cluster's
                tables.append((table, None, exc.message))
            except ClientError as exc:
                tables.append((table, None, exc.message))
            else:
                tables.append((table, where, None))
    except ClientError as exc:
        catalog_error = exc.message
    addresses = {t.address for t in tservers or []}
    for _, located, _ in tables:
        for tablet in located.tablets if located is not None else []:
            addresses.update(r.address for r in tablet.replicas)
    servers = await _ask_all(
        {a: (lambda a=a: server_status(a)) for a in sorted(addresses)},  # type: ignore[misc]
        per_call)
    return Facts(statuses, tservers, tables, servers, catalog_error)


# ---------------------------------------------------------------------------- checking


@attrs.define
class Verdict:
    problems: list[str] = attrs.Factory(list)
    warnings: list[str] = attrs.Factory(list)


def _server_replicas(facts: Facts) -> dict[tuple[str, str], tuple[str, ReplicaInfo]]:
    """(address, tablet id) -> (server uuid, its replica), for every server that answered."""
    out: dict[tuple[str, str], tuple[str, ReplicaInfo]] = {}
    for address, answer in facts.servers.items():
        if answer.error is None:
            status: ServerStatus = answer.value
            for info in status.replicas:
                out[(address, info.tablet_id)] = (status.uuid, info)
    return out


def _check_masters(facts: Facts, verdict: Verdict) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    leaders: set[str] = set()
    terms: dict[int, list[str]] = {}  # term -> the masters in it
    configs: set[tuple[str, ...]] = set()
    ready = 0
    for address, answer in facts.masters.items():
        if answer.error is not None:
            verdict.problems.append(f"master {address} unreachable: {answer.error}")
            rows.append({"address": address, "uuid": None, "reachable": False, "role": None,
                         "term": None, "leader": None, "ready": False, "config": None,
                         "error": answer.error})
            continue
        st: api.MasterStatus = answer.value
        if st.leader:
            leaders.add(st.leader)
        terms.setdefault(st.term, []).append(address)
        configs.add(tuple(sorted(st.masters)))
        ready += st.ready
        rows.append({"address": address, "uuid": st.uuid, "reachable": True, "role": st.role,
                     "term": st.term, "leader": st.leader, "ready": st.ready,
                     "config": sorted(st.masters), "error": None})
    if len(leaders) > 1:
        verdict.problems.append(f"the masters disagree on the leader: {', '.join(sorted(leaders))}")
    if len(terms) > 1:
        # One Raft group: once a leader's heartbeats reach every master they share its
        # term. A master in another term is partitioned, or campaigning (a higher term:
        # it will depose the leader), or has not heard from the leader since a newer
        # election (a lower one): in each case not a settled cluster, as Kudu's ksck says.
        verdict.problems.append("the masters disagree on the term: " + "; ".join(
            f"term {term}: {', '.join(sorted(addresses))}"
            for term, addresses in sorted(terms.items())))
    if ready != 1:
        verdict.problems.append("no master is the ready leader" if ready == 0 else
                                f"{ready} masters say they are the ready leader")
    if len(configs) > 1:
        verdict.problems.append("the masters disagree on the catalog's voters: " + " vs ".join(
            ",".join(c) for c in sorted(configs)))
    asked = sorted(facts.masters)
    for config in configs:
        if list(config) != asked:
            verdict.warnings.append(f"the catalog's voters ({','.join(config)}) are not the "
                                    f"masters given ({','.join(asked)})")
    return rows


def _check_tservers(facts: Facts, verdict: Verdict) -> list[dict[str, Any]]:
    """A dead server that the catalog places no replica on is a warning, not a problem (as
    Kudu's ksck: nothing is lost with it); ``tserver unregister`` forgets it."""
    hosting = {r.uuid for _, where, _ in facts.tables if where is not None
               for tablet in where.tablets for r in tablet.replicas}
    rows: list[dict[str, Any]] = []
    for t in sorted(facts.tservers or [], key=lambda t: t.address):
        answer = facts.servers.get(t.address, Answer(None, "not asked"))
        error = answer.error
        if error is None and answer.value.uuid != t.uuid:
            error = f"answers as {answer.value.uuid}, not {t.uuid} (wiped?)"
        if not t.live and t.uuid not in hosting and facts.catalog_error is None:
            verdict.warnings.append(
                f"tablet server {t.uuid} ({t.address}) is dead (no heartbeat for "
                f"{t.seconds_since_heartbeat:.1f}s) and hosts no replica: 'revivify tserver "
                f"unregister {t.uuid}' forgets it")
        elif not t.live:
            verdict.problems.append(f"tablet server {t.uuid} ({t.address}) is dead: no "
                                    f"heartbeat for {t.seconds_since_heartbeat:.1f}s")
        forgettable = not t.live and t.uuid not in hosting and facts.catalog_error is None
        if error is not None and not forgettable:  # the warning above speaks for its silence
            verdict.problems.append(f"tablet server {t.uuid} ({t.address}) does not answer: "
                                    f"{error}")
        rows.append({"uuid": t.uuid, "address": t.address, "live": t.live,
                     "seconds_since_heartbeat": round(t.seconds_since_heartbeat, 3),
                     "answers": error is None, "error": error,
                     "replicas": None if error is not None else len(answer.value.replicas)})
    return rows


def _peer_set(peers: list[Any]) -> set[tuple[str, str]]:
    return {(p.uuid, p.member_type) for p in peers}


# What each catalog replica's server said about it: the replica's info when its server
# hosts it, and its state (the info's, or UNREACHABLE, WRONG_SERVER, NOT_HOSTED).
ReplicaAnswer = tuple[api.ReplicaLocationInfo, ReplicaInfo | None, str]


def _check_tablet(table: str, tablet: api.TabletLocationInfo, replica_count: int,
                  hosted: dict[tuple[str, str], tuple[str, ReplicaInfo]],
                  facts: Facts, verdict: Verdict) -> dict[str, Any]:
    """One tablet's row: its replicas as their servers report them, its leader, and its
    status; problems and warnings go to `verdict` (issues in the order found)."""
    issues: list[str] = []
    catalog = {(r.uuid, r.member_type) for r in tablet.replicas}
    voters = [r for r in tablet.replicas if r.member_type == VOTER]
    infos = _replica_answers(tablet, hosted, facts)
    leaders = [(info.term, r.uuid) for r, info, _ in infos
               if info is not None and info.role == LEADER]
    leader_term, leader_uuid = max(leaders) if leaders else (None, None)
    # Two replicas that both say LEADER in the same term break Raft's election safety (at
    # most one leader per term): never a transient, always a mismatch. A leader in an
    # older term than another's is a deposed one that has not heard of the new term yet.
    split_leaders = len([t for t, _ in leaders if t == leader_term]) > 1
    if split_leaders:
        issues.append(f"two leaders in term {leader_term}")
    leader_info = next((info for r, info, _ in infos if r.uuid == leader_uuid), None)
    live_voters = sum(1 for r, info, state in infos
                      if r.member_type == VOTER and info is not None and state == RUNNING)
    replicas, mismatched = _check_replicas(table, tablet, infos, leader_info, catalog,
                                           issues, verdict)
    if mismatched:
        issues.append(f"config mismatch: the catalog has {_config_text(catalog)}; "
                      f"{', '.join(mismatched)} report otherwise")
    tombstones = sorted(address for (address, tablet_id), (_, info) in hosted.items()
                        if tablet_id == tablet.tablet_id and info.state == TOMBSTONED
                        and address not in {r.address for r in tablet.replicas})
    status = _tablet_status(tablet, len(voters), live_voters, replica_count,
                            bool(mismatched) or split_leaders, leader_uuid, issues)
    if status != HEALTHY:
        verdict.problems.append(f"tablet {tablet.tablet_id} of {table} is {status}: "
                                + "; ".join(issues))
    return {"tablet_id": tablet.tablet_id, "partition": tablet.partition,
            "state": tablet.state, "catalog_config_index": tablet.config_index,
            "moving_from": tablet.moving_from, "status": status, "leader": leader_uuid,
            "term": leader_term, "replica_count": replica_count, "live_voters": live_voters,
            "issues": issues, "replicas": replicas, "tombstones_elsewhere": tombstones}


def _replica_answers(tablet: api.TabletLocationInfo,
                     hosted: dict[tuple[str, str], tuple[str, ReplicaInfo]],
                     facts: Facts) -> list[ReplicaAnswer]:
    """Each catalog replica with what its server said (ReplicaAnswer), in catalog order."""
    infos: list[ReplicaAnswer] = []
    for r in tablet.replicas:
        server = facts.servers.get(r.address)
        found = hosted.get((r.address, tablet.tablet_id))
        if server is None or server.error is not None:
            infos.append((r, None, "UNREACHABLE"))
        elif server.value.uuid != r.uuid:
            infos.append((r, None, "WRONG_SERVER"))
        elif found is None:
            infos.append((r, None, "NOT_HOSTED"))
        else:
            infos.append((r, found[1], found[1].state))
    return infos


def _check_replicas(table: str, tablet: api.TabletLocationInfo, infos: list[ReplicaAnswer],
                    leader_info: ReplicaInfo | None, catalog: set[tuple[str, str]],
                    issues: list[str], verdict: Verdict
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    """Each replica's row, and the UUIDs of the running replicas whose config is not the
    catalog's; a replica not RUNNING is an issue, a lagging one a warning."""
    replicas: list[dict[str, Any]] = []
    mismatched: list[str] = []
    for r, info, state in infos:
        lagging = (info is not None and leader_info is not None and state == RUNNING
                   and info.commit_index < leader_info.commit_index)
        mismatch = (info is not None and state == RUNNING and _peer_set(info.peers) != catalog)
        if mismatch:
            mismatched.append(r.uuid)
        if state == TOMBSTONED:
            issues.append(f"the replica on {r.uuid} ({r.address}) is a tombstone")
        elif state != RUNNING:
            issues.append(f"the replica on {r.uuid} ({r.address}) is {state}"
                          + (f" ({info.reason})" if info is not None and info.reason else ""))
        if lagging:
            assert info is not None and leader_info is not None
            verdict.warnings.append(
                f"tablet {tablet.tablet_id} of {table}: the replica on {r.uuid} is lagging "
                f"(committed {info.commit_index}, the leader {leader_info.commit_index})")
        replicas.append({
            "uuid": r.uuid, "address": r.address, "member_type": r.member_type,
            "role": member_role(info.role, r.member_type) if info is not None else None,
            "live": r.live, "state": state,
            "term": info.term if info is not None else None,
            "last_opid": list(info.last_opid) if info is not None else None,
            "commit_index": info.commit_index if info is not None else None,
            "config_index": info.config_index if info is not None else None,
            "lagging": lagging, "tombstoned": state == TOMBSTONED,
            "config_mismatch": mismatch,
            "peers": [peer_doc(p) for p in info.peers] if info is not None else None})
    return replicas, mismatched


def _tablet_status(tablet: api.TabletLocationInfo, voters: int, live_voters: int,
                   replica_count: int, mismatch: bool, leader_uuid: str | None,
                   issues: list[str]) -> str:
    """The tablet's status, the worst first: no live majority, replicas that disagree (a
    config mismatch or two leaders in a term), too few live voters, no leader yet or not
    RUNNING in the catalog; else HEALTHY. Adds the reason to `issues`."""
    majority = voters // 2 + 1
    if live_voters < majority:
        issues.append(f"{live_voters} of {voters} voters live, a majority is {majority}")
        return UNAVAILABLE
    if mismatch:
        return CONSENSUS_MISMATCH
    if live_voters < replica_count:
        issues.append(f"{live_voters} live voters, {replica_count} wanted")
        return UNDER_REPLICATED
    if leader_uuid is None or tablet.state != RUNNING:
        issues.append("no leader" if leader_uuid is None else f"{tablet.state} in the catalog")
        return RECOVERING
    return HEALTHY


def _config_text(config: set[tuple[str, str]]) -> str:
    return "[" + ", ".join(f"{u}" + ("" if m == VOTER else f" ({m})")
                           for u, m in sorted(config)) + "]"


def check(facts: Facts) -> dict[str, Any]:
    """The ksck document: every fact, every problem, the verdict."""
    verdict = Verdict()
    masters = _check_masters(facts, verdict)
    if facts.catalog_error is not None:
        verdict.problems.append(f"the leader master did not answer: {facts.catalog_error}")
    tservers = _check_tservers(facts, verdict)
    hosted = _server_replicas(facts)
    tables: list[dict[str, Any]] = []
    statuses: Counter[str] = Counter()
    for table, where, error in facts.tables:
        if where is None:
            verdict.problems.append(f"table {table.name}: no locations: {error}")
            tables.append({"name": table.name, "table_id": table.table_id,
                           "state": table.state, "status": "UNKNOWN", "error": error,
                           "tablets": []})
            continue
        tablets = []
        for tablet in sorted(where.tablets, key=lambda t: t.partition):
            voters = sum(1 for r in tablet.replicas if r.member_type == VOTER)
            count = where.num_replicas or voters  # 0: a master that does not say
            tablets.append(_check_tablet(table.name, tablet, count, hosted, facts, verdict))
        counts = Counter(t["status"] for t in tablets)
        statuses.update(counts)
        worst = next((s for s in (UNAVAILABLE, CONSENSUS_MISMATCH, UNDER_REPLICATED,
                                  RECOVERING) if counts[s]), HEALTHY)
        tables.append({"name": table.name, "table_id": table.table_id, "state": table.state,
                       "status": worst, "error": None, "tablets": tablets})
    healthy = not verdict.problems
    summary = _summary(healthy, masters, tservers, tables, statuses, verdict)
    return {"healthy": healthy, "summary": summary, "problems": verdict.problems,
            "warnings": verdict.warnings, "masters": masters, "tservers": tservers,
            "tables": tables}


def _summary(healthy: bool, masters: list[dict[str, Any]], tservers: list[dict[str, Any]],
             tables: list[dict[str, Any]], statuses: Counter[str], verdict: Verdict) -> str:
    tablets = sum(statuses.values())
    counts = (f"{len(masters)} master{'s' if len(masters) != 1 else ''}, {len(tservers)} "
              f"tablet server{'s' if len(tservers) != 1 else ''}, {len(tables)} "
              f"table{'s' if len(tables) != 1 else ''}, {tablets} "
              f"tablet{'s' if tablets != 1 else ''}")
    if healthy:
        return f"HEALTHY: {counts}" + (f" ({len(verdict.warnings)} warning(s))"
                                       if verdict.warnings else "")
    bad: list[str] = []
    down = sum(1 for m in masters if not m["reachable"])
    if down:
        bad.append(f"{down} master(s) unreachable")
    if not any(m["ready"] for m in masters):
        bad.append("no ready leader master")
    dead = [t for t in tservers if not t["live"] or not t["answers"]]
    if dead:
        bad.append(f"{len(dead)} tablet server(s) dead or unreachable ("
                   + ", ".join(f"{t['uuid']} at {t['address']}" for t in dead) + ")")
    disagree = [p.split(":")[0][len("the masters disagree on "):] for p in verdict.problems
                if p.startswith("the masters disagree on ")]
    if disagree:
        bad.append(f"the masters disagree on {' and '.join(disagree)}")
    for status in (UNAVAILABLE, CONSENSUS_MISMATCH, UNDER_REPLICATED, RECOVERING):
        if statuses[status]:
            bad.append(f"{statuses[status]} tablet(s) {status.lower().replace('_', '-')}")
    if not bad:
        bad.append(f"{len(verdict.problems)} problem(s)")
    return f"NOT HEALTHY: {'; '.join(bad)} [{counts}]"


__all__ = ["CONSENSUS_MISMATCH", "HEALTHY", "RECOVERING", "UNAVAILABLE", "UNDER_REPLICATED",
           "Answer", "Facts", "NoMaster", "check", "gather"]
