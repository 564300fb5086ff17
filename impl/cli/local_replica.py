"""Commands on a server's directory itself, in the manner of ``kudu local_replica`` and
``kudu fs``: they read (and, the server stopped, change) the files, never over RPC.

  revivify tserver wipe --fs-root DIR [--yes] [--json]
  revivify local-replica list --fs-root DIR [--json]
  revivify local-replica purge-quarantine --fs-root DIR [--tablet ID] [--dry-run] [--json]

``tserver wipe`` clears a stopped server's directory (instance file, superblocks, cmeta,
WALs, data blocks, quarantine) so that the next ``tserver run`` formats it with a new UUID:
the old UUID is gone for good (its peers refuse requests addressed to it; a replica it held
must be replaced, as after a disk loss). It keeps ``DIR/LOCK``, ``DIR/traces`` (the old
UUID's traces are history the trace checker needs: there the wipe shows as a new UUID) and
anything that is not one of revivify's names. It asks for confirmation on a terminal unless
``--yes``; without a terminal ``--yes`` is required.

``local-replica list`` shows every tablet on disk: its data state (the superblock's READY,
COPYING or DELETED; not the lifecycle state RUNNING, TOMBSTONED, ... that a running
server's ``replica list`` shows), the tombstone's last OpId, term, vote and committed
config index (cmeta), its WAL (segments, last OpId) and its quarantine directories.
Read-only: it may run while the server runs.

``local-replica purge-quarantine`` removes quarantine directories (all, or one tablet's) and
the data blocks only they reference, and prints per tablet what went and the bytes freed;
``--dry-run`` prints the same and removes nothing. It never removes a block a live superblock
lists, and removes nothing at all if a live superblock does not read.

Wipe and purge need the server stopped: they take the directory's lock (``DIR/LOCK``, an
exclusive flock the server holds while it runs) and refuse if a process holds it.

Exit codes: 0 done (or nothing to do); 1 refused: the directory is in use by another process,
is not a revivify data directory, a wipe of it was interrupted (purge), wipe not confirmed,
or an I/O error while removing; 2 bad usage, a missing directory or one that is not
formatted, or a file that does not read or verify (named with its error; the others are
listed or purged all the same). Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from revivify.impl.storage.disk import OsDisk
from revivify.impl.storage.errors import (
    DirectoryLocked,
    InvalidName,
    NotFormatted,
    StorageError,
    WipeInterrupted,
)
from revivify.impl.storage.layout import ServerLayout
from revivify.impl.storage.offline import (
    DirectoryReport,
    Problem,
    PurgePlan,
    TabletOnDisk,
    execute_purge,
    inspect_directory,
    plan_purge,
)
from revivify.impl.storage.values import MemberType

from . import render
from .common import Outcome, Parser, fail, json_flag, parse_args, print_outcome

LIST_PROG = "revivify local-replica list"
PURGE_PROG = "revivify local-replica purge-quarantine"


class _Refused(Exception):
    """A command that will not go on: its one-line message and exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _fs_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fs-root", required=True, metavar="DIR",
                   help="the tablet server's directory (its --fs-root)")


def _run(prog: str, args: argparse.Namespace, work: Callable[[], Outcome]) -> int:
    """Run `work`, print its outcome (JSON or text, then the complaint), map errors."""
    try:
        outcome = work()
    except _Refused as exc:
        return fail(prog, exc.message, exc.code)
    except KeyboardInterrupt:
        raise
    except OSError as exc:
        return fail(prog, f"I/O error: {_os_error(exc)}", 1)
    except Exception as exc:  # the last line of defence: a message, not a traceback
        return fail(prog, f"internal error: {type(exc).__name__}: {exc}", 2)
    return print_outcome(prog, args, outcome)


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def _layout(root: str) -> ServerLayout:
    """The layout of an existing directory (else _Refused, exit 2)."""
    disk = OsDisk()
    if not disk.exists(root):
        raise _Refused(f"{root}: no such directory", 2)
    if not disk.is_dir(root):
        raise _Refused(f"{root}: not a directory", 2)
    return ServerLayout(root, disk)


def _problems_line(problems: Sequence[Problem]) -> str:
    shown = "; ".join(f"{p.path}: {p.error}" for p in problems[:5])
    more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    noun = "file does" if len(problems) == 1 else "files do"
    return f"{len(problems)} {noun} not read or verify: {shown}{more}"


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable


def _problem_docs(problems: Sequence[Problem]) -> list[dict[str, str]]:
    return [{"path": p.path, "error": p.error} for p in problems]


# ---------------------------------------------------------------------------- tserver wipe


# ---------------------------------------------------------------------------- list


def _opid_doc(value: tuple[int, int] | None) -> list[int] | None:
    return None if value is None else list(value)


def _tablet_doc(t: TabletOnDisk) -> dict[str, Any]:
    sb, cm = t.superblock, t.cmeta
    return {
        "tablet_id": t.tablet_id,
        "data_state": t.data_state,
        "tombstone_last_opid": _opid_doc(
            (sb.tombstone_last_opid.term, sb.tombstone_last_opid.index)
            if sb is not None and sb.tombstone_last_opid is not None else None),
        "quarantine_pointer": None if sb is None else sb.quarantine_dir,
        "flushed_opid": _opid_doc((sb.flushed_opid.term, sb.flushed_opid.index)
                                  if sb is not None and sb.flushed_opid is not None else None),
        "live_blocks": t.live_blocks,
        "missing_blocks": t.missing_blocks,
        "cmeta_state": t.cmeta_state,
        "cmeta": None if cm is None else {
            "term": cm.current_term, "voted_for": cm.voted_for,
            "config_index": cm.committed_config.opid_index or 0,
            "voters": sorted(p.uuid for p in cm.committed_config.peers
                             if p.member_type is MemberType.VOTER)},
        "wal": None if t.wal is None else {"segments": t.wal.segments,
                                           "last_opid": _opid_doc(t.wal.last_opid)},
        "quarantine": [{"path": q.path, "superblock": q.superblock, "cmeta": q.cmeta,
                        "wal": q.wal, "files": q.files, "bytes": q.bytes}
                       for q in t.quarantine],
        "problems": _problem_docs(t.problems),
    }


def _list_doc(report: DirectoryReport) -> dict[str, Any]:
    inst = report.instance
    return {
        "fs_root": report.root,
        "server_uuid": None if inst is None else inst.server_uuid,
        "format_time_ns": None if inst is None else inst.format_time_ns,
        "wipe_interrupted": report.wipe_interrupted,
        "tablets": [_tablet_doc(t) for t in report.tablets],
        "unreferenced_blocks": len(report.unreferenced_blocks),
        "problems": _problem_docs(report.problems),
    }


def _list_text(report: DirectoryReport) -> str:
    inst = report.instance
    lines = [f"fs root:  {report.root}",
             f"server:   {inst.server_uuid if inst else '(instance file unreadable)'}",
             f"tablets:  {len(report.tablets)}"]
    if report.wipe_interrupted:
        lines.append("WARNING: a wipe of this directory was interrupted; run "
                     "'revivify tserver wipe' again to finish it")
    rows: list[list[object]] = []
    for t in report.tablets:
        sb, cm = t.superblock, t.cmeta
        last = sb.tombstone_last_opid if sb is not None else None
        if t.wal is None:
            wal = None
        else:
            wal_last = render.opid(t.wal.last_opid) if t.wal.last_opid else "empty"
            wal = f"{t.wal.segments} seg, last {wal_last}"
        blocks = f"{t.live_blocks}" + (f" ({t.missing_blocks} missing)" if t.missing_blocks
                                       else "")
        quarantine = ", ".join(
            q.path.rsplit("/", 1)[-1] + "(" + "".join(
                flag for flag, on in (("S", q.superblock), ("C", q.cmeta), ("W", q.wal))
                if on) + ")" for q in t.quarantine)
        rows.append([t.tablet_id, t.data_state,
                     None if last is None else render.opid((last.term, last.index)),
                     t.cmeta_state if cm is None else cm.current_term,
                     None if cm is None else cm.voted_for, wal, blocks, quarantine])
    if rows:
        lines.append(render.table(["TABLET", "DATA STATE", "TOMBSTONE", "TERM", "VOTE", "WAL",
                                   "BLOCKS", "QUARANTINE (S superblock, C cmeta, W wal)"],
                                  rows))
    if report.unreferenced_blocks:
        lines.append(f"unreferenced data blocks: {len(report.unreferenced_blocks)}")
    for p in report.problems:
        lines.append(f"problem: {p.path}: {p.error}")
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> Outcome:
    layout = _layout(args.fs_root)
    report = inspect_directory(layout)
    if not report.formatted:
        raise _Refused(f"{layout.root} is not a revivify data directory (no instance file)", 2)
    complaint = _problems_line(report.problems) if report.problems else None
    return Outcome(2 if report.problems else 0, _list_doc(report), _list_text(report),
                   complaint)


# ---------------------------------------------------------------------------- purge


def _purge_doc(plan: PurgePlan, dry_run: bool) -> dict[str, Any]:
    tablets: dict[str, dict[str, Any]] = {}
    for item in plan.items:
        doc = tablets.setdefault(item.qdir.tablet_id, {
            "tablet_id": item.qdir.tablet_id, "dirs": [], "blocks_removed": 0,
            "block_bytes": 0, "blocks_kept": 0, "blocks_already_absent": 0,
            "bytes_freed": 0})
        doc["dirs"].append({"path": item.qdir.path, "files": item.qdir.files,
                            "bytes": item.qdir.bytes})
        doc["blocks_removed"] += len(item.blocks)
        doc["block_bytes"] += item.block_bytes
        doc["blocks_kept"] += item.blocks_kept
        doc["blocks_already_absent"] += item.blocks_absent
        doc["bytes_freed"] += item.qdir.bytes + item.block_bytes
    return {"fs_root": plan.root, "dry_run": dry_run, "tablets": list(tablets.values()),
            "skipped": [{"path": s.path, "tablet_id": s.tablet_id, "reason": s.reason}
                        for s in plan.skipped],
            "bytes_freed": plan.bytes_freed, "problems": _problem_docs(plan.problems)}


def _purge_text(doc: dict[str, Any]) -> str:
    verb = "would remove" if doc["dry_run"] else "removed"
    lines: list[str] = []
    for t in doc["tablets"]:
        dirs = ", ".join(d["path"].rsplit("/", 1)[-1] for d in t["dirs"])
        kept = f"; {t['blocks_kept']} blocks kept (still referenced)" if t["blocks_kept"] \
            else ""
        lines.append(f"{t['tablet_id']}: {verb} {dirs} and {t['blocks_removed']} data "
                     f"blocks ({_size(t['block_bytes'])}){kept}; "
                     f"{'would free' if doc['dry_run'] else 'freed'} "
                     f"{_size(t['bytes_freed'])}")
    for s in doc["skipped"]:
        lines.append(f"{s['tablet_id']}: kept {s['path']}: {s['reason']}")
    if not doc["tablets"]:
        lines.append("nothing to purge")
    else:
        total = "would free" if doc["dry_run"] else "freed"
        lines.append(f"{total} {_size(doc['bytes_freed'])} in all")
    return "\n".join(lines)


def _purge(args: argparse.Namespace) -> Outcome:
    layout = _layout(args.fs_root)
    try:
        return _purge_locked(layout, args)
    finally:
        layout.release_lock()


def _purge_locked(layout: ServerLayout, args: argparse.Namespace) -> Outcome:
    try:
        layout.open()  # takes the lock: refused while a server runs
    except DirectoryLocked as exc:
        raise _Refused(f"{exc}: stop the server first", 1) from None
    except WipeInterrupted as exc:
        raise _Refused(str(exc), 1) from None
    except NotFormatted:
        raise _Refused(f"{layout.root} is not a revivify data directory (no instance file)",
                       2) from None
    except StorageError as exc:
        raise _Refused(str(exc), 2) from None
    try:
        plan = plan_purge(layout, args.tablet)
    except InvalidName as exc:
        raise _Refused(f"--tablet: {exc}", 2) from None
    if plan.blocking:
        raise _Refused(f"nothing purged: a live superblock does not read, so no block can be "
                       f"proven unreferenced: {_problems_line(plan.blocking)}", 2)
    if not args.dry_run:
        execute_purge(layout, plan)
    doc = _purge_doc(plan, args.dry_run)
    complaint = _problems_line(plan.problems) if plan.problems else None
    return Outcome(2 if plan.problems else 0, doc, _purge_text(doc), complaint)


def local_replica_main(argv: list[str]) -> int:
    """``revivify local-replica list | purge-quarantine``."""
    parser = Parser(prog="revivify local-replica",
                     description="a server's replicas as its directory holds them")
    sub = parser.add_subparsers(dest="cmd", required=True,
                                metavar="{list,purge-quarantine}")
    listing = sub.add_parser(
        "list", parents=[json_flag()], help="every tablet on disk",
        description="Every tablet in the directory: data state (superblock), tombstone's "
                    "last OpId, term and vote (cmeta), WAL (segments, last OpId), blocks, "
                    "quarantine directories. Read-only; the server may be running.")
    _fs_root(listing)
    purge = sub.add_parser(
        "purge-quarantine", parents=[json_flag()],
        help="remove quarantine directories and the blocks only they reference",
        description="Remove the quarantine directories of deleted tablets (all, or one "
                    "tablet's) and the data blocks only they reference (never a block a "
                    "live superblock lists). The server must be stopped.")
    _fs_root(purge)
    purge.add_argument("--tablet", default=None, metavar="ID",
                       help="only this tablet's quarantine directories")
    purge.add_argument("--dry-run", action="store_true",
                       help="print what would be removed; remove nothing")
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    if args.cmd == "list":
        return _run(LIST_PROG, args, lambda: _list(args))
    return _run(PURGE_PROG, args, lambda: _purge(args))


__all__ = ["local_replica_main"]
