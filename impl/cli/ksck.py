"""``revivify ksck``: is the cluster healthy? In the manner of ``kudu cluster ksck``.

  revivify ksck --masters HOST:PORT,... | --root DIR [--json] [--deadline SECONDS]

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
and on the catalog's voters, a master is the ready leader, every tablet server is live and answers,
and every tablet is HEALTHY. Exit 0 healthy; 1 not (every problem listed, then the
summary line); 2 bad usage, or no master could be reached.
"""

from __future__ import annotations

import argparse
from typing import Any

from revivify.impl.client.ksck import HEALTHY, Answer, Facts, check, gather

from . import render
from .common import (
    Outcome,
    Parser,
    common_flags,
    execute,
    masters_flags,
    parse_args,
)

PROG = "revivify ksck"


# ---------------------------------------------------------------------------- text


def _text(doc: dict[str, Any]) -> str:
    lines = ["Masters", render.table(
        ["ADDRESS", "UUID", "ROLE", "TERM", "LEADER", "READY"],
        [[m["address"], m["uuid"], m["role"] if m["reachable"] else "UNREACHABLE", m["term"],
          m["leader"], "yes" if m["ready"] else None] for m in doc["masters"]])]
    lines += ["", "Tablet servers", render.table(
        ["UUID", "ADDRESS", "MASTER SAYS", "ANSWERS", "REPLICAS"],
        [[t["uuid"], t["address"], "live" if t["live"] else "DEAD",
          "yes" if t["answers"] else "NO", t["replicas"]] for t in doc["tservers"]])
        if doc["tservers"] else "(none known)"]
    lines += ["", "Tables"]
    if doc["tables"]:
        lines.append(render.table(
            ["NAME", "STATE", "TABLETS", "HEALTHY", "STATUS"],
            [[t["name"], t["state"], len(t["tablets"]),
              sum(1 for x in t["tablets"] if x["status"] == HEALTHY), t["status"]]
             for t in doc["tables"]]))
    else:
        lines.append("(no tables)")
    for table in doc["tables"]:
        for tablet in table["tablets"]:
            if tablet["status"] == HEALTHY:
                continue
            moving = (f"; a replica moving off {tablet['moving_from']}"
                      if tablet["moving_from"] else "")
            lines += ["", f"Tablet {tablet['tablet_id']} of {table['name']}: "
                          f"{tablet['status']} ({tablet['live_voters']} of "
                          f"{tablet['replica_count']} voters live{moving})"]
            lines.append(render.table(
                ["UUID", "ADDRESS", "MEMBER", "STATE", "ROLE", "TERM", "COMMITTED", "CONFIG",
                 "NOTE"],
                [[r["uuid"], r["address"], r["member_type"], r["state"], r["role"], r["term"],
                  r["commit_index"], r["config_index"],
                  ", ".join(n for n, on in (("lagging", r["lagging"]),
                                            ("config mismatch", r["config_mismatch"]),
                                            ("server dead", not r["server_live"])) if on)]
                 for r in tablet["replicas"]]))
    if doc["problems"]:
        lines += ["", "Problems"] + [f"- {p}" for p in doc["problems"]]
    if doc["warnings"]:
        lines += ["", "Warnings"] + [f"- {w}" for w in doc["warnings"]]
    lines += ["", f"ksck: {doc['summary']}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- command


def ksck_main(argv: list[str]) -> int:
    parser = Parser(prog=PROG, parents=[common_flags(), masters_flags()],
                    description="Check a cluster's health: masters (reachable, role, term, "
                                "leader agreement, ready), tablet servers (live as the "
                                "leader master sees them, answering), every table and "
                                "tablet (replicas, leader, lagging, tombstoned, "
                                "under-replicated, config mismatch). Exit 0 healthy, 1 "
                                "not, 2 bad usage or no master reachable.")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    if not isinstance(args, argparse.Namespace):  # pragma: no cover
        return 2

    async def work() -> Outcome:
        facts = await gather(list(args.masters), args.deadline)
        doc = check(facts)
        return Outcome(0 if doc["healthy"] else 1, doc, _text(doc))

    return execute(PROG, args, work)


__all__ = ["Answer", "Facts", "check", "gather", "ksck_main"]
