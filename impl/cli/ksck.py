"""``revivify ksck``: is the cluster healthy? In the manner of ``kudu cluster ksck``.

  revivify ksck --masters HOST:PORT,... | --root DIR [--json] [--deadline SECONDS]

What it asks and how it judges (the tablet statuses, when the cluster is healthy, the exit
codes) is impl/client/ksck.py's, which the masters' ``/ksck`` page shares; this module is
the command: its flags, its text and its JSON.
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
                                            ("server dead", not r["live"])) if on)]
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
