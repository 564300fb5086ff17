"""``history check --html FILE``: a history's failing window drawn, as Porcupine draws one.

One lane per client process, time going right: the history's lines are its real-time order
(a line is an instant), so each operation is a bar from its invocation's line to its
completion's. An operation whose outcome is unknown (``info``, or never completed) runs on
to the drawing's right edge, dashed: it may take effect at any time after its invocation,
or never. Per failing key: the smallest failing window (``checker/linearizability``'s
``smallest_window``: no order of its operations gives every result) shaded, its
operations red (``class="op window-op"``, the straddling and pending ones marked so in
their tooltips), and the key's other operations overlapping the window, ``CONTEXT`` lines
either side of it, grey for context. Output stays bounded: at most ``MAX_OPS`` operations
per key and ``MAX_DRAWN`` failing keys drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from revivify.checker.htmlpage import Svg, esc, facts, fit, page, write_page
from revivify.checker.linearizability import CheckResult, History, Operation, Window, show
from revivify.checker.linearizability.history import Key

CONTEXT: Final = 10  # lines either side of the window whose operations are drawn too
MAX_OPS: Final = 200
MAX_DRAWN: Final = 20

LEFT: Final = 110
TOP: Final = 34
LANE_H: Final = 30
BAR_H: Final = 20
PLOT_W: Final = 1000

ROLE_TEXT: Final = {
    "complete": "invoked and completed in the window",
    "pending": "completes after the window: may take effect in it, or not",
    "straddling": "invoked before the window: may have taken effect before it",
}


def op_label(op: Operation) -> str:
    if op.f == "read":
        return f"r {show(op.value) if op.ret is not None else '?'}"
    if op.f == "write":
        return f"w {show(op.value)}"
    return f"cas {show(op.value)}"


def draw_window(n: int, key_ops: Sequence[Operation], window: Window) -> str:
    """The SVG of one key's failing window."""
    in_window = {w.op.index: w.role for w in window.operations}
    lo_line = max(1, window.first_line - CONTEXT)
    hi_line = window.last_line + CONTEXT
    shown = [op for op in key_ops
             if op.index in in_window
             or (op.invoke_line <= hi_line
                 and (op.complete_line is None or op.complete_line >= lo_line))]
    if len(shown) > MAX_OPS:  # the window's own first, then the nearest context
        shown = sorted(shown, key=lambda op: (op.index not in in_window,
                                              abs(op.invoke_line - window.first_line)))
        shown = sorted(shown[:MAX_OPS], key=lambda op: op.invoke_line)
    lo = min([lo_line, *(op.invoke_line for op in shown)])
    hi = max([hi_line, *(op.complete_line or op.invoke_line for op in shown)]) + 1
    # At least 30 px a line while the whole stays under 4000 px: a short operation keeps a
    # readable label; a long window scrolls sideways rather than shrinking to slivers.
    px = max(PLOT_W / max(hi - lo, 1), min(30.0, 4000 / max(hi - lo, 1)))
    plot_w = px * (hi - lo)
    procs = sorted({op.process for op in shown},
                   key=lambda p: (0, p, "") if isinstance(p, int) else (1, 0, p))
    y_of = {p: TOP + i * LANE_H for i, p in enumerate(procs)}
    width = LEFT + plot_w + 30
    height = TOP + len(procs) * LANE_H + 30

    def x(line: float) -> float:
        return LEFT + (line - lo) * px

    svg = Svg(width, height, f"failing window {n}")
    svg.rect(x(window.first_line), TOP - 8, (window.last_line + 1 - window.first_line) * px,
             len(procs) * LANE_H + 8, class_="window-span", id=f"window-{n}")
    svg.text(x(window.first_line), TOP - 12,
             f"window: lines {window.first_line}-{window.last_line}", class_="axis")
    for p in procs:
        svg.open_group(title=f"process {p}", class_="lane", data_process=p)
        svg.text(8, y_of[p] + 14, f"process {p}", class_="lane-head")
        svg.line(LEFT, y_of[p] + BAR_H / 2, LEFT + plot_w, y_of[p] + BAR_H / 2,
                 class_="lane-line")
        svg.close_group()
    for op in shown:
        role = in_window.get(op.index)
        end = op.complete_line if op.ret is not None and op.complete_line else hi
        outcome = ("ok" if op.ret is not None
                   else "info (unknown outcome)" if op.complete_line else "never completed")
        cls = ["op", "window-op" if role else "context-op"]
        if op.ret is None:
            cls.append("open")
        title = (f"process {op.process}: {op.f} {show(op.value)}, {outcome}; invoked at "
                 f"line {op.invoke_line}, completed at "
                 f"{op.complete_line if op.complete_line is not None else '-'}"
                 + (f"; in the window: {ROLE_TEXT[role]}" if role else ""))
        svg.open_group(title=title, class_=" ".join(cls), data_role=role,
                       data_invoke=op.invoke_line)
        w = max((end - op.invoke_line) * px, 4.0)
        svg.rect(x(op.invoke_line), y_of[op.process], w, BAR_H, class_="box")
        svg.text(x(op.invoke_line) + 3, y_of[op.process] + 14, fit(op_label(op), w - 4))
        svg.close_group()
    axis_y = TOP + len(procs) * LANE_H + 16
    step = max(1, (hi - lo) // 10)
    for line in range(lo, hi + 1, step):
        svg.text(x(line), axis_y, f"{line}", class_="axis")
    return svg.render()


def _window_table(window: Window) -> str:
    head = "<tr><th>process</th><th>op</th><th>value</th><th>invoked</th>" \
           "<th>completed</th><th>in the window</th></tr>"
    rows = "".join(
        f"<tr><td>{esc(w.op.process)}</td><td>{esc(w.op.f)}</td>"
        f"<td>{esc(show(w.op.value))}</td><td>{w.op.invoke_line}</td>"
        f"<td>{esc(w.op.complete_line if w.op.complete_line is not None else '-')}</td>"
        f"<td>{esc(ROLE_TEXT[w.role])}</td></tr>"
        for w in window.operations)
    return f'<table class="window-ops">{head}{rows}</table>'


def render(path: str, model: str, history: History, result: CheckResult) -> str:
    body = ["<h1>revivify history check</h1>",
            facts([("file", path), ("model", model),
                   ("operations", str(result.operations)),
                   ("keys", str(len(result.keys)))])]
    if result.linearizable:
        body.append('<p class="verdict-clean" id="verdict">linearizable: every key\'s '
                    "operations have an order that gives every result; no failing window."
                    "</p>")
        return page("history check: linearizable", body)
    failures = result.failures
    body.append(f'<p class="verdict-bad" id="verdict">NOT linearizable: {len(failures)} '
                f"key(s) fail.</p>")
    body.append(f'<p class="note">One lane per process, time going right (the file\'s '
                f"lines). Shaded: the smallest failing window, its operations red; grey: "
                f"the key's other operations within {CONTEXT} lines of it; dashed: an "
                f"unknown outcome (may take effect, or never).</p>")
    by_key: dict[Key, list[Operation]] = {}
    for op in history.operations:
        by_key.setdefault(op.key, []).append(op)
    for n, k in enumerate(failures, start=1):
        title = f"key {show(k.key)}" if model == "kv" else "the register"
        body.append(f'<section class="finding" id="key-{n}">')
        if k.window is None:
            body.append(f"<h2>{n}. {esc(title)}: not linearizable (no window)</h2>")
        else:
            w = k.window
            start = ("from the initial nil" if w.from_nil
                     else "from whatever value it held before")
            body.append(f"<h2>{n}. {esc(title)}: lines {w.first_line}-{w.last_line}, "
                        f"{len(w.operations)} operation(s) with no order, {esc(start)}, "
                        f"that gives every result"
                        + ("" if w.minimal else " (the search for a smaller window ran "
                                                "out of time)") + "</h2>")
            if n <= MAX_DRAWN:
                body.append(draw_window(n, by_key.get(k.key, []), w))
            else:
                body.append(f'<p class="note">not drawn: only the first {MAX_DRAWN} keys '
                            f"are.</p>")
            body.append(_window_table(w))
        body.append("</section>")
    return page("history check: NOT linearizable", body)


def write_history_html(out: str, path: str, model: str, history: History,
                       result: CheckResult) -> None:
    """Raises OSError when ``out`` cannot be written."""
    write_page(out, render(path, model, history, result))
