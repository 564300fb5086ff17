"""How the server commands print: tables and progress bars for people, JSON for programs.

Every command builds one plain JSON-able document (dicts, lists, strings, numbers, None)
and one text rendering of the same facts; ``--json`` prints the document (one line, UTF-8),
otherwise the text. Bytes (row keys and values) are shown as UTF-8 text, undecodable bytes
as backslash escapes, or as lowercase hex with ``--hex``, in both forms.

Two audiences for the text. A person at a terminal gets ``table`` drawn by rich (bold
headers, a rule under them, columns fitted to the terminal) and ``progress`` as a live bar
on stderr. A script (stdout or stderr not a terminal, or ``TERM=dumb``) gets exactly the
plain forms it always had, which scripts and tests parse: columns aligned on the widest
cell, two spaces apart, the same column names in the same order, and one progress line per
event on stderr. rich is imported only on the terminal path.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal, TextIO

if TYPE_CHECKING:  # the types only: printing a table must not load the client library
    from revivify.impl.client import ReplicaStatus, TabletStatus
    from revivify.impl.consensus.messages import Peer
    from revivify.impl.master.api import TableLocationsReply
    from revivify.impl.tserver.api import ReplicaInfo, ServerStatus


def dumps(document: Any) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def show_bytes(data: bytes, hex_mode: bool) -> str:
    return data.hex() if hex_mode else data.decode("utf-8", "backslashreplace")


def is_terminal(stream: TextIO | None = None) -> bool:
    """Output for a person: ``stream`` (stdout by default) is a terminal, not TERM=dumb."""
    stream = sys.stdout if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: not a person
        return False
    return tty and os.environ.get("TERM") != "dumb"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The rows under their headers: a rich table on a terminal, else plain_table."""
    if not is_terminal():
        return plain_table(headers, rows)
    import shutil  # (and bz2, lzma, fnmatch: a terminal's table only, like rich)

    from rich import box
    from rich.console import Console
    from rich.table import Table

    drawn = Table(box=box.SIMPLE_HEAD, header_style="bold", show_edge=False)
    for header in headers:
        drawn.add_column(str(header), overflow="fold")
    for row in rows:
        drawn.add_row(*[_cell(c) for c in row])
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True,
            width=shutil.get_terminal_size().columns).print(drawn)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns aligned on the widest cell, two spaces apart, no trailing blanks."""
    cells = [[str(h) for h in headers], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


ProgressUnit = Literal["items", "bytes"]


class Progress:
    """Progress of long work on stderr (``progress``): ``note`` a line, ``advance`` the
    count of items done (or ``update`` it to a count), ``set_total`` when more items turn
    up, ``describe`` what is being done now, ``refresh`` the bar. This plain form, for
    scripts, prints the notes alone: the counts are for the bar."""

    def __init__(self, description: str, total: int) -> None:
        self.description = description
        self.total = total
        self.done = 0

    def note(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def advance(self, count: int = 1) -> None:
        self.done += count

    def update(self, done: int) -> None:
        self.done = done

    def set_total(self, total: int) -> None:
        self.total = total

    def describe(self, description: str) -> None:
        self.description = description

    def refresh(self) -> None:
        pass


class _BarProgress(Progress):
    """The terminal form: a rich bar (description, bar, done/total, elapsed; for bytes:
    done/total in KB/MB/GB and the rate) on stderr, the notes printed above it. Refreshed
    by the caller (no thread of its own)."""

    def __init__(self, description: str, total: int, unit: ProgressUnit) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            ProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as RichProgress

        super().__init__(description, total)
        counts: list[ProgressColumn] = (
            [DownloadColumn(), TransferSpeedColumn()] if unit == "bytes"
            else [MofNCompleteColumn()])
        self.bar = RichProgress(TextColumn("{task.description}"), BarColumn(), *counts,
                                TimeElapsedColumn(), console=Console(file=sys.stderr),
                                auto_refresh=False)
        self.task = self.bar.add_task(description, total=total)

    def note(self, line: str) -> None:
        self.bar.console.print(line, highlight=False, markup=False)
        self.refresh()

    def advance(self, count: int = 1) -> None:
        super().advance(count)
        self.bar.update(self.task, completed=self.done)
        self.refresh()

    def update(self, done: int) -> None:
        super().update(done)
        self.bar.update(self.task, completed=self.done)
        self.refresh()

    def set_total(self, total: int) -> None:
        super().set_total(total)
        self.bar.update(self.task, total=total)
        self.refresh()

    def describe(self, description: str) -> None:
        super().describe(description)
        self.bar.update(self.task, description=description)
        self.refresh()

    def refresh(self) -> None:
        self.bar.refresh()


_progress_shown = False  # a command showed its own progress: announce_wait stays quiet

WAIT_NOTICE_AFTER = 2.0
"""Seconds a command may wait in silence before announce_wait says so on stderr."""

_SPINNER = "|/-\\"


async def announce_wait(prog: str, deadline: float, after: float = WAIT_NOTICE_AFTER,
                        waited: float = 0.0) -> None:
    """Say on stderr that ``prog`` is still waiting once ``after`` seconds have passed
    (issue 31: a command that waits 10 s in silence looks hung). On a terminal a spinner
    with the seconds waited, erased when the caller cancels this task (the answer came);
    otherwise one line, which scripts can tell from the answer (stdout) and the error
    (the last stderr line). Nothing when the command shows progress of its own
    (`progress`), which says more than a spinner, or whose deadline leaves less than
    a second of waiting after the notice (the answer or the error is about to come).
    ``waited``: seconds the command waited before this started (a fast attempt that did
    not answer: common.fast_first); the notice comes no earlier than they make ``after``."""
    import trio

    if deadline < after + 1.0:
        return
    after = max(after, waited)
    await trio.sleep(after - waited)
    if _progress_shown:
        return
    if not is_terminal(sys.stderr):
        print(f"{prog}: still waiting for an answer after {after:.3g}s (trying until the "
              f"deadline, {deadline:g}s)", file=sys.stderr, flush=True)
        return
    started = trio.current_time() - after
    frame = 0
    try:
        while not _progress_shown:
            waited = trio.current_time() - started
            sys.stderr.write(f"\r{_SPINNER[frame % len(_SPINNER)]} {prog}: waiting for an "
                             f"answer, {waited:.0f}s of {deadline:g}s")
            sys.stderr.flush()
            frame += 1
            await trio.sleep(0.1)
    finally:
        sys.stderr.write("\r\033[K")  # the spinner's line, erased
        sys.stderr.flush()


@contextmanager
def progress(description: str, total: int, *, enabled: bool = True,
             unit: ProgressUnit = "items") -> Iterator[Progress]:
    """Progress on stderr for work of ``total`` items (``unit="bytes"``: bytes, shown as
    sizes and a rate): a live bar when stderr is a terminal, else one plain line per
    ``note`` (what scripts and tests read). ``enabled`` False (``--json``): notes still go
    to stderr as lines, no bar."""
    global _progress_shown
    _progress_shown = True
    if not (enabled and is_terminal(sys.stderr)):
        yield Progress(description, total)
        return
    shown = _BarProgress(description, total, unit)
    with shown.bar:
        yield shown


def opid(value: tuple[int, int] | Sequence[int]) -> str:
    term, index = value
    return f"{term}.{index}"


# ---------------------------------------------------------------------------- documents
# The documents themselves are impl/client/documents.py's (shared with the status pages);
# peer_doc, replica_doc and server_status_doc are re-exported for the commands, imported
# when first called (documents.py brings the RPC types with it).


def peer_doc(peer: Peer) -> dict[str, Any]:
    from revivify.impl.client.documents import peer_doc as doc

    return doc(peer)


def replica_doc(info: ReplicaInfo, uuid: str | None = None, address: str | None = None,
                live: bool = True) -> dict[str, Any]:
    from revivify.impl.client.documents import replica_doc as doc

    return doc(info, uuid, address, live)


def member_role(role: str, member_type: str | None, leader: bool = False) -> str:
    from revivify.impl.client.documents import member_role as word

    return word(role, member_type, leader)


def server_status_doc(status: ServerStatus) -> dict[str, Any]:
    from revivify.impl.client.documents import server_status_doc as doc

    return doc(status)


def server_status_text(status: ServerStatus) -> str:
    lines = [f"uuid:     {status.uuid}", f"address:  {status.address}",
             f"replicas: {len(status.replicas)}"]
    if status.replicas:
        lines.append(table(
            ["TABLET", "STATE", "ROLE", "TERM", "LAST", "COMMITTED", "LEADER"],
            [[r.tablet_id, r.state, member_role(r.role, r.member_type), r.term,
              opid(r.last_opid), r.commit_index, r.leader] for r in status.replicas]))
    return "\n".join(lines)


def _replica_row_doc(row: ReplicaStatus) -> dict[str, Any]:
    """One server's answer in ``tablet status --json``: the replica vocabulary's keys
    (documents.replica_doc) when it has the replica, ``live`` false when it did not
    answer."""
    doc: dict[str, Any] = {"uuid": row.uuid, "address": row.address,
                           "live": row.reachable, "error": row.error}
    if row.info is not None:
        doc.update(replica_doc(row.info, row.uuid, row.address, row.reachable))
    return doc


def tablet_status_doc(status: TabletStatus) -> dict[str, Any]:
    """``tablet status --json``: each replica with its server's "answer" (ok, not hosted, no
    answer, unreachable, refused)."""
    leader = status.leader
    return {
        "tablet_id": status.tablet_id,
        "leader": None if leader is None else leader.uuid,
        "leader_address": None if leader is None else leader.address,
        "replicas": [{**_replica_row_doc(r), "answer": r.answer} for r in status.replicas],
    }


def tablet_status_text(status: TabletStatus) -> str:
    """The replicas as a table: what each server answered in the ANSWER column, its
    replica's state in the others (left empty for a server that gave none), then why each
    server that gave no state gave none."""
    from revivify.impl.client.admin import ANSWER_NO_ANSWER, ANSWER_OK

    rows: list[list[object]] = []
    notes: list[str] = []
    for r in status.replicas:
        info = r.info
        answer = r.answer
        if info is None:
            rows.append([r.address, r.uuid, answer, None, None, None, None, None, None])
            if r.error and r.error != answer:
                notes.append(f"{r.address}: {r.error}")
            continue
        state = info.state if not info.reason else f"{info.state} ({info.reason})"
        rows.append([r.address, r.uuid, ANSWER_OK, state,
                     member_role(info.role, info.member_type), info.term,
                     opid(info.last_opid), info.commit_index, info.config_index])
    leader = status.leader
    said = "none" if leader is None else f"{leader.uuid} ({leader.address})"
    silent = [r for r in status.replicas if r.answer == ANSWER_NO_ANSWER]
    if leader is None and silent:
        said += " among the servers that answered"
    return "\n".join([
        f"tablet {status.tablet_id}",
        table(["ADDRESS", "UUID", "ANSWER", "STATE", "ROLE", "TERM", "LAST", "COMMITTED",
               "CONFIG"], rows),
        *notes,
        f"leader: {said}",
    ])


def table_locations_text(reply: TableLocationsReply) -> str:
    """``table describe``: the table's line, then one row per replica of every tablet in
    partition order, the tablet's columns repeated on each of its rows (so a line read
    alone, by grep, still says which tablet it is). ROLE is LEADER for the replica the
    catalog records as leading, else FOLLOWER or LEARNER (a NON_VOTER), LIVE what the
    leader master's heartbeats say."""
    rows: list[list[object]] = []
    for t in sorted(reply.tablets, key=lambda t: t.partition):
        state = t.state + (f" (moving off {t.moving_from[:8]})" if t.moving_from else "")
        tablet: list[object] = [t.partition, t.tablet_id, state, t.term]
        if not t.replicas:
            rows.append([*tablet, None, None, None, None, None])
        for p in t.replicas:
            rows.append([*tablet, p.uuid, p.address, p.member_type,
                         member_role("FOLLOWER", p.member_type, p.leader),
                         "yes" if p.live else "DEAD"])
    n = reply.num_replicas
    replicas = f", {n} replica{'s' if n != 1 else ''} each" if n else ""
    head = (f"table {reply.name} {reply.table_id} v{reply.schema_version}: "
            f"{reply.num_tablets} tablet{'s' if reply.num_tablets != 1 else ''}{replicas}")
    if reply.columns:
        head += "\ncolumns: " + ", ".join(
            f"{c.name} {c.type}{' key' if c.key else ''} (v{c.added_in})" for c in reply.columns)
    if not rows:
        return head
    return "\n".join([head, table(
        ["PARTITION", "TABLET", "STATE", "TERM", "REPLICA", "ADDRESS", "MEMBER", "ROLE",
         "LIVE"], rows)])


__all__ = [
    "WAIT_NOTICE_AFTER",
    "Progress",
    "ProgressUnit",
    "announce_wait",
    "dumps",
    "is_terminal",
    "member_role",
    "opid",
    "peer_doc",
    "plain_table",
    "progress",
    "replica_doc",
    "server_status_doc",
    "server_status_text",
    "show_bytes",
    "table",
    "table_locations_text",
    "tablet_status_doc",
    "tablet_status_text",
]
