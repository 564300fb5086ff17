"""``trace check --html FILE``: each finding drawn as a timeline of the servers involved.

One lane per server incarnation (node UUID, shortened, and incarnation), time going down.
The rows are the input's events in one order that every file's line order and every
node's incarnation order respect, guided by the Lamport clocks (a merge of the files: the
next row is the eligible event of lowest clock, where a node's incarnation ``n + 1`` is
eligible only after its incarnation ``n`` ended). Clocks restart in each incarnation, so a
clock is comparable only along a causal chain: the rows are one plausible interleaving, not
a claim about real time.

Per finding: the event at its file:line is the anchor (a global finding without a line:
its first witness), marked ``class="ev offending"`` with ``id="offending-N"``; the
finding's witnesses are marked ``witness``. The window is ``window`` events of the
anchor's tablet before it and after it in that order (when the anchor has no tablet -- a
server's or a master's event, an unreadable line -- the events of the nodes the finding
names), with the server events of its lanes between them, the witnesses and the anchor's
proven cause added. Beside the anchor, the spec's expected value
and the observed one, as the checker explained them. Output stays bounded whatever the
input: ``window`` rows around each finding (``WINDOW`` by default) and at most
``MAX_DRAWN`` findings drawn (the rest listed by their header only).

Causal links are drawn only where the trace proves a message, by the protocol rules the
global checks rely on (traces/README.md, "Majorities and causality"); messages carry no
ids, so nothing else is linked:

* ``start_election`` of candidate ``c`` (its term ``t`` after it) -> every
  ``vote_granted``/``vote_denied`` of ``candidate=c, t`` on another node: the vote answers
  ``c``'s RequestVote of ``t``, sent after that event. Drawn only when ``c`` logged one
  ``start_election`` for ``t`` on the tablet (several incarnations could have sent it).
* ``become_leader(me=L, t)`` -> every ``log_append`` on another node whose last entry's
  term is ``t`` and whose term after it is ``t``: a node takes entries of its own term only
  from that term's leader, which sends them after it became leader. Drawn only when ``t``
  has one ``become_leader`` on the tablet.

A link whose receiving event's clock is not above the sending event's is drawn dashed red:
no message of that send could carry such a clock (unless the sender restarted, which the
link's uniqueness rule above leaves out).

Lines are read here again, tolerantly (a line the checker refused still gets a row, grey,
so a malformed or torn line is marked where it is); the page never trusts a string of the
trace (``checker/htmlpage.py``).
"""

from __future__ import annotations

import heapq
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Final

import attrs
import msgspec

from revivify.checker.htmlpage import Svg, clip, esc, facts, fit, page, wrap, write_page
from revivify.checker.keys import Violation
from revivify.checker.report import Report
from revivify.checker.traces import discover, name_incarnation, read_bytes

WINDOW: Final = 25  # events of the anchor's tablet drawn before it, and after it
MAX_DRAWN: Final = 20  # findings drawn; later ones get their header only
RAW_CHARS: Final = 2000  # a line's text in its tooltip, at most
SERVER_EVENTS: Final = frozenset({"server_format", "server_start", "server_stop"})
UNREADABLE: Final = "(unreadable line)"

# The drawing's geometry (px).
LEFT: Final = 70
TOP: Final = 56
LANE_W: Final = 230
ROW_H: Final = 26
BOX_H: Final = 20
CALLOUT_W: Final = 460


@attrs.define(eq=False)
class TraceEvent:
    """One line of a trace file as the page shows it. ``pos``: its row in the merged
    order of the whole input."""

    file: str  # absolute path
    line: int
    node: str
    inc: int
    seq: int | None
    lamport: int
    wall_ns: int
    event: str
    tablet: str | None
    args: dict[str, Any]
    term_after: int | None  # the state's cmeta term, if the line has one
    raw: str
    pos: int = -1

    @property
    def lane(self) -> tuple[str, int]:
        return (self.node, self.inc)


@attrs.frozen
class Needed:
    """The lines a page needs, known before the files are read from the findings' places
    (their lines and their witnesses'): the events of those lines' tablets, every event of
    the nodes of their tablet-less lines (and of a node such a line's arguments name), the
    server events (a lane's starts and stops), the lines themselves, and every unreadable
    line. Nothing else is kept: the page's memory follows the findings' tablets, not the
    input's size."""

    places: frozenset[tuple[str, int]]
    tablets: frozenset[str]
    nodes: frozenset[str]

    def __call__(self, file: str, line: int, node: str, tablet: str | None,
                 event: str) -> bool:
        return ((tablet is not None and tablet in self.tablets) or node in self.nodes
                or event in SERVER_EVENTS or (file, line) in self.places)


def _lines(path: str) -> list[bytes]:
    try:
        return read_bytes(path).split(b"\n")
    except (OSError, EOFError):
        return []


def needed(findings: Sequence[Violation]) -> Needed:
    places: set[tuple[str, int]] = set()
    for v in findings:
        if v.file and v.line > 0:
            places.add((os.path.abspath(v.file), v.line))
        places.update(_witness_places(v))
    tablets: set[str] = set()
    nodes: set[str] = set()
    for file in {f for f, _ in places}:
        lines = _lines(file)
        named = name_incarnation(file)
        for f, n in places:
            if f != file or n > len(lines):
                continue
            try:
                obj = msgspec.json.decode(lines[n - 1])
            except msgspec.DecodeError:
                obj = None
            if not isinstance(obj, dict):
                if named:
                    nodes.add(named[0])
                continue
            if isinstance(obj.get("tablet"), str):
                tablets.add(obj["tablet"])
                continue
            nodes.add(obj["node"] if isinstance(obj.get("node"), str)
                      else named[0] if named else "")
            args = obj.get("args")
            if isinstance(args, dict):
                nodes.update(a for a in args.values() if isinstance(a, str))
    return Needed(frozenset(places), frozenset(tablets), frozenset(nodes))


class _Head(msgspec.Struct):
    """What every line gives the page, typed; ``args`` and ``state`` decoded only for a
    line it keeps (a line of other types goes through ``_loose``)."""

    node: str | None = None
    inc: int | None = None
    seq: int | None = None
    lamport: int | None = None
    wall_ns: int | None = None
    tablet: str | None = None
    event: str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")
    state: msgspec.Raw = msgspec.Raw(b"")


_HEAD = msgspec.json.Decoder(_Head)
# The events whose state's term a causal link needs (``causal_links``).
_TERM_EVENTS: Final = frozenset({"start_election", "log_append"})


def _loose(raw: bytes) -> _Head | None:
    """A line ``_HEAD`` refused: its fields of the right types, the rest left out; None
    for a line that is not a JSON object."""
    try:
        obj = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    if not isinstance(obj, dict):
        return None

    def typed(name: str, t: type) -> Any:
        v = obj.get(name)
        return v if isinstance(v, t) and not isinstance(v, bool) else None

    return _Head(typed("node", str), typed("inc", int), typed("seq", int),
                 typed("lamport", int), typed("wall_ns", int), typed("tablet", str),
                 typed("event", str), msgspec.Raw(msgspec.json.encode(obj.get("args"))),
                 msgspec.Raw(msgspec.json.encode(obj.get("state"))))


def _decoded(raw: msgspec.Raw) -> Any:
    try:
        return msgspec.json.decode(raw) if len(raw) else None
    except msgspec.DecodeError:
        return None


def read_file(path: str, keep: Needed | None = None) -> list[TraceEvent]:
    """The non-blank lines of one trace file that ``keep`` wants (None: every one), in
    line order; a line that is not a JSON object (torn, malformed) becomes an
    ``UNREADABLE`` row of the file's node."""
    named = name_incarnation(path)
    node, inc = named if named else (os.path.basename(path), 0)
    lamport, wall = 0, 0
    out: list[TraceEvent] = []
    for n, raw in enumerate(_lines(path), start=1):
        if not raw.strip():
            continue
        head: _Head | None
        try:
            head = _HEAD.decode(raw)
        except msgspec.DecodeError:  # a ValidationError too
            head = _loose(raw)
        if head is None:
            out.append(TraceEvent(path, n, node, inc, None, lamport, wall, UNREADABLE,
                                  None, {}, None,
                                  clip(raw.decode("utf-8", "replace"), RAW_CHARS)))
            continue
        node = head.node if head.node is not None else node
        inc = head.inc if head.inc is not None else inc
        lamport = head.lamport if head.lamport is not None else lamport
        wall = head.wall_ns if head.wall_ns is not None else wall
        event = head.event if head.event is not None else "?"
        if keep is not None and not keep(path, n, node, head.tablet, event):
            continue
        args = _decoded(head.args)
        term = None
        if event in _TERM_EVENTS:
            state = _decoded(head.state)
            cmeta = state.get("cmeta") if isinstance(state, dict) else None
            term = cmeta.get("term") if isinstance(cmeta, dict) else None
        out.append(TraceEvent(
            path, n, node, inc, head.seq, lamport, wall, event, head.tablet,
            args if isinstance(args, dict) else {},
            term if isinstance(term, int) and not isinstance(term, bool) else None,
            clip(raw.decode("utf-8", "replace"), RAW_CHARS)))
    return out


def merge(files: Sequence[list[TraceEvent]]) -> list[TraceEvent]:
    """All events in one order (see the module's docstring); sets each ``pos``."""
    by_node: dict[str, list[list[TraceEvent]]] = defaultdict(list)
    for evs in files:
        if evs:
            by_node[evs[0].node].append(evs)
    queues = {node: sorted(streams, key=lambda s: (s[0].inc, s[0].file))
              for node, streams in by_node.items()}
    heap: list[tuple[int, int, str, int, int, str]] = []
    cursor: dict[str, tuple[int, int]] = {}  # node -> (stream, index in it)

    def push(node: str) -> None:
        si, i = cursor[node]
        streams = queues[node]
        while si < len(streams) and i >= len(streams[si]):
            si, i = si + 1, 0
        cursor[node] = (si, i)
        if si < len(streams):
            e = streams[si][i]
            heapq.heappush(heap, (e.lamport, e.wall_ns, node, e.inc, e.line, e.file))

    for node in queues:
        cursor[node] = (0, 0)
        push(node)
    out: list[TraceEvent] = []
    while heap:
        node = heapq.heappop(heap)[2]
        si, i = cursor[node]
        e = queues[node][si][i]
        e.pos = len(out)
        out.append(e)
        cursor[node] = (si, i + 1)
        push(node)
    return out


@attrs.frozen
class Link:
    src: TraceEvent
    dst: TraceEvent
    what: str

    @property
    def backwards(self) -> bool:
        return self.dst.lamport <= self.src.lamport


def causal_links(events: Iterable[TraceEvent]) -> list[Link]:
    """The links the trace proves (see the module's docstring)."""
    elections: dict[tuple[str | None, str, int], list[TraceEvent]] = defaultdict(list)
    leaders: dict[tuple[str | None, int], list[TraceEvent]] = defaultdict(list)
    votes: list[TraceEvent] = []
    appends: list[TraceEvent] = []
    for e in events:
        if e.event == "start_election" and e.term_after is not None:
            elections[(e.tablet, e.node, e.term_after)].append(e)
        elif e.event == "become_leader" and isinstance(e.args.get("t"), int):
            leaders[(e.tablet, e.args["t"])].append(e)
        elif e.event in ("vote_granted", "vote_denied"):
            votes.append(e)
        elif e.event == "log_append":
            appends.append(e)
    links: list[Link] = []
    for v in votes:
        cand, t = v.args.get("candidate"), v.args.get("t")
        if not isinstance(cand, str) or not isinstance(t, int) or cand == v.node:
            continue
        starts = elections.get((v.tablet, cand, t), [])
        if len(starts) == 1:
            links.append(Link(starts[0], v, f"RequestVote of term {t}"))
    for a in appends:
        t = a.args.get("op_term")
        if not isinstance(t, int) or a.term_after != t:
            continue
        won = leaders.get((a.tablet, t), [])
        if len(won) == 1 and won[0].node != a.node:
            links.append(Link(won[0], a, f"entries of term {t} from its leader"))
    return links


def _short(uuid: str) -> str:
    return uuid[:8]


def summary(e: TraceEvent) -> str:
    """An event's label: the clock, the event, its arguments (UUIDs shortened)."""
    if e.event == UNREADABLE:
        return f"{UNREADABLE} {e.raw}"
    parts = []
    for k, v in e.args.items():
        if isinstance(v, str) and len(v) >= 16:
            v = _short(v)
        elif isinstance(v, list) and len(v) > 3:
            v = f"[{len(v)}]"
        elif isinstance(v, list):
            v = ",".join(_short(x) if isinstance(x, str) else str(x) for x in v)
        parts.append(f"{k}={v}")
    return f"@{e.lamport} {e.event} " + " ".join(parts)


def _witness_places(v: Violation) -> list[tuple[str, int]]:
    """(absolute file, line) of each witness (``file:line ...``)."""
    out = []
    for w in v.witnesses:
        f, _, line = w.partition(" ")[0].rpartition(":")
        if f and line.isdigit():
            out.append((os.path.abspath(f), int(line)))
    return out


def _anchor(v: Violation, at: dict[tuple[str, int], TraceEvent],
            by_file: dict[str, list[TraceEvent]]) -> TraceEvent | None:
    """The event at the finding's file:line (the nearest line before it when that line
    gave no row), else at its first witness's."""
    places = [(os.path.abspath(v.file), v.line)] if v.file and v.line > 0 else []
    for place in [*places, *_witness_places(v)]:
        if place in at:
            return at[place]
        before = [e for e in by_file.get(place[0], []) if e.line <= place[1]]
        if before:
            return before[-1]
    return None


def _witness_events(v: Violation, at: dict[tuple[str, int], TraceEvent]) -> list[TraceEvent]:
    return [at[p] for p in _witness_places(v) if p in at]


@attrs.frozen
class Drawn:
    """One finding's timeline: its rows, lanes and links, and the anchor."""

    anchor: TraceEvent
    rows: tuple[TraceEvent, ...]
    lanes: tuple[tuple[str, int], ...]
    links: tuple[Link, ...]
    witnesses: frozenset[int]  # ids of the witness events


def window_of(anchor: TraceEvent, order: list[TraceEvent], witnesses: list[TraceEvent],
              links: list[Link], window: int, nodes: frozenset[str]) -> Drawn:
    """The rows around ``anchor``: the events of its tablet; for an anchor without one (a
    server's or master's event, an unreadable line) the events of the nodes the finding
    names (the anchor's, its witnesses', a node its arguments name, as a master call's
    ``dest``). ``nodes``: every node of the input."""
    if anchor.tablet is not None:
        tablet = anchor.tablet

        def related(e: TraceEvent) -> bool:
            return e.tablet == tablet
    else:
        named = {anchor.node, *(w.node for w in witnesses),
                 *(a for a in anchor.args.values() if isinstance(a, str) and a in nodes)}

        def related(e: TraceEvent) -> bool:
            return e.node in named
    before: list[TraceEvent] = []
    i = anchor.pos - 1
    while i >= 0 and len(before) < window:
        if related(order[i]):
            before.append(order[i])
        i -= 1
    after: list[TraceEvent] = []
    i = anchor.pos + 1
    while i < len(order) and len(after) < window:
        if related(order[i]):
            after.append(order[i])
        i += 1
    chosen = {id(e): e for e in (*before, anchor, *after, *witnesses)}
    chosen.update({id(lk.src): lk.src for lk in links if lk.dst is anchor})
    lanes = {e.lane for e in chosen.values()}
    lo = min(e.pos for e in chosen.values())
    hi = max(e.pos for e in chosen.values())
    for e in order[lo:hi + 1]:  # the lanes' starts and stops between the rows
        if e.event in SERVER_EVENTS and e.lane in lanes:
            chosen[id(e)] = e
    rows = tuple(sorted(chosen.values(), key=lambda e: e.pos))
    drawn = [lk for lk in links if id(lk.src) in chosen and id(lk.dst) in chosen]
    return Drawn(anchor, rows, tuple(sorted(lanes)), tuple(drawn),
                 frozenset(id(w) for w in witnesses))


def _lane_name(lane: tuple[str, int]) -> str:
    return f"{_short(lane[0])} inc {lane[1]}"


def draw(n: int, v: Violation, d: Drawn) -> str:
    """The SVG of one finding's timeline."""
    x_of = {lane: LEFT + i * LANE_W for i, lane in enumerate(d.lanes)}
    y_of = {id(e): TOP + i * ROW_H for i, e in enumerate(d.rows)}
    lanes_w = len(d.lanes) * LANE_W
    width = LEFT + lanes_w + 20 + CALLOUT_W + 20
    height = TOP + len(d.rows) * ROW_H + 20
    callout = _callout_lines(v)
    height = max(height, y_of[id(d.anchor)] + 16 * len(callout) + 40)
    svg = Svg(width, height, f"timeline of finding {n}: {v.kind}")
    for lane, x in x_of.items():
        svg.open_group(title=f"node {lane[0]}, incarnation {lane[1]}", class_="lane",
                       data_node=lane[0], data_inc=lane[1])
        svg.text(x + 8, 22, _lane_name(lane), class_="lane-head")
        svg.line(x + LANE_W / 2, 32, x + LANE_W / 2, height - 8, class_="lane-line")
        svg.close_group()
    svg.text(6, 22, "row", class_="axis")
    for e in d.rows:
        y = y_of[id(e)]
        svg.text(6, y + 14, f"{e.pos}", class_="axis")
        cls = ["ev"]
        if e is d.anchor:
            cls.append("offending")
        elif id(e) in d.witnesses:
            cls.append("witness")
        if e.event == UNREADABLE:
            cls.append("unreadable")
        x = x_of[e.lane]
        title = f"{rel(e.file)}:{e.line}  lamport {e.lamport}\n{e.raw}"
        svg.open_group(title=title, class_=" ".join(cls),
                       id=f"offending-{n}" if e is d.anchor else None,
                       data_file=os.path.basename(e.file), data_line=e.line,
                       data_event=e.event)
        svg.rect(x + 6, y, LANE_W - 12, BOX_H, class_="box")
        svg.text(x + 10, y + 14, fit(summary(e), LANE_W - 20))
        svg.close_group()
    for lk in d.links:
        sx, sy = x_of[lk.src.lane], y_of[id(lk.src)] + BOX_H / 2
        tx, ty = x_of[lk.dst.lane], y_of[id(lk.dst)] + BOX_H / 2
        if tx > sx:
            x1, x2 = sx + LANE_W - 6, tx + 6
        else:
            x1, x2 = sx + 6, tx + LANE_W - 6
        note = (" (the receiver's clock is not above the sender's)" if lk.backwards
                else "")
        svg.arrow(x1, sy, x2, ty,
                  f"{lk.what}: {rel(lk.src.file)}:{lk.src.line} -> "
                  f"{rel(lk.dst.file)}:{lk.dst.line}{note}",
                  class_="link backwards" if lk.backwards else "link")
    cx = LEFT + lanes_w + 20
    cy = y_of[id(d.anchor)]
    svg.open_group(class_="callout", id=f"callout-{n}")
    svg.rect(cx, cy - 4, CALLOUT_W, 16 * len(callout) + 12)
    for i, (cls_name, text) in enumerate(callout):
        svg.text(cx + 8, cy + 12 + 16 * i, text, class_=cls_name)
    svg.close_group()
    return svg.render()


def _callout_lines(v: Violation) -> list[tuple[str, str]]:
    chars = int((CALLOUT_W - 16) / 6.7)
    out: list[tuple[str, str]] = []
    if v.observed:
        out += [("obs", s) for s in wrap("observed: " + v.observed, chars, 3)]
    for exp in v.expected[:3]:
        out += [("spec", s) for s in wrap("spec: " + exp, chars, 3)]
    out += [("", s) for s in wrap(v.message, chars, 4)]
    return out


def rel(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


def _header(n: int, v: Violation) -> str:
    where = f"{v.file}:{v.line}" if v.file and v.line else (v.file or v.subject)
    rows = [("severity", v.severity), ("kind", v.kind), ("at", where),
            ("description", v.message)]
    if v.subject and v.subject != where:
        rows.append(("subject", v.subject))
    if v.event:
        rows.append(("event", f"{v.event} (node {v.node}, tablet {v.tablet})"
                     if v.node else v.event))
    if v.failed:
        rows.append(("failed", v.failed))
    if v.observed:
        rows.append(("observed", v.observed))
    rows += [("spec expects", e) for e in v.expected]
    if v.also:
        rows.append(("also", ", ".join(v.also)))
    rows += [("witness", w) for w in v.witnesses]
    return (f'<h2 id="finding-{n}">{n}. {esc(v.severity.upper())} {esc(v.kind)} at '
            f"{esc(where)}</h2>" + facts(rows))


def render(findings: Sequence[Violation], paths: Sequence[str], summary_line: str,
           window: int = WINDOW, max_drawn: int = MAX_DRAWN) -> str:
    """The page for ``findings`` over the trace files under ``paths``."""
    body = ["<h1>revivify trace check</h1>",
            f'<p class="note">{esc(summary_line)}</p>']
    if not findings:
        body.append('<p class="verdict-clean" id="verdict">no findings</p>')
        return page("trace check: no findings", body)
    body.append(f'<p class="verdict-bad" id="verdict">{len(findings)} finding(s)</p>')
    body.append(f'<p class="note">Each timeline: one lane per server incarnation, time '
                f"going down (rows: one interleaving of the files by Lamport clock; at "
                f"most {window} events of the finding's tablet before and after it). Red: "
                f"the finding's line; amber: its witnesses; arrows: messages the trace "
                f"proves (dashed red: the receiver's clock is not above the sender's).</p>")
    files, _ = discover(paths)
    keep = needed(findings[:max_drawn])
    per_file = [read_file(f, keep) for f in files]
    order = merge(per_file)
    at = {(e.file, e.line): e for e in order}
    by_file = {evs[0].file: evs for evs in per_file if evs}
    links = causal_links(order)
    nodes = frozenset(e.node for e in order)
    for n, v in enumerate(findings, start=1):
        body.append(f'<section class="finding" data-kind="{esc(v.kind)}">')
        body.append(_header(n, v))
        anchor = _anchor(v, at, by_file) if n <= max_drawn else None
        if n > max_drawn:
            body.append(f'<p class="note">not drawn: only the first {max_drawn} findings '
                        f"are.</p>")
        elif anchor is None:
            body.append('<p class="note">no line of the input to draw this finding at.</p>')
        else:
            d = window_of(anchor, order, _witness_events(v, at), links, window, nodes)
            body.append(draw(n, v, d))
        body.append("</section>")
    return page(f"trace check: {len(findings)} finding(s)", body)


def write_report_html(path: str, report: Report, paths: Sequence[str],
                      window: int = WINDOW) -> None:
    """``trace check --html``: the page of ``report``'s findings (warnings included) over
    the files under ``paths``. Raises OSError when ``path`` cannot be written."""
    c = report.counts
    line = (f"{report.events} events in {report.files} files checked: {c['violation']} "
            f"violation(s), {c['error']} input error(s), {c['warning']} warning(s) -> "
            f"exit {report.exit_code()}")
    write_page(path, render(report.sorted(), paths, line, window))
