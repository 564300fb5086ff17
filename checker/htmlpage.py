"""One self-contained HTML page with inline SVG: the drawing both finding reports share
(``checker/timeline.py`` for the trace checker's findings, ``checker/history_timeline.py``
for a history's failing window).

Everything drawn from a trace or a history is untrusted input: every string goes through
``esc`` (text and attribute values alike), and the page's Content-Security-Policy allows no
script and no network at all, so even a string that escaped the escaping could neither run
nor fetch anything. Hover details are SVG ``<title>`` tooltips and CSS ``:hover``: no
JavaScript. The page is written with ``write_page`` in one piece (a temporary file renamed
over the target), so a reader never sees half a report.
"""

from __future__ import annotations

import contextlib
import html
import os
import tempfile
from collections.abc import Iterable
from typing import Final

CSS: Final = """
body { font-family: sans-serif; margin: 1em 2em; color: #222; background: #fff; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
.finding { border-top: 2px solid #ccc; margin-top: 1.5em; }
.verdict-clean { color: #1a7f37; font-weight: bold; }
.verdict-bad { color: #b3261e; font-weight: bold; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.facts dt { font-weight: bold; } dl.facts dd { margin: 0; font-family: monospace;
  white-space: pre-wrap; word-break: break-all; }
.note { color: #555; font-size: 0.9em; }
.scroll { overflow-x: auto; }
table.window-ops { border-collapse: collapse; margin-top: 0.8em; font-size: 0.9em; }
table.window-ops td, table.window-ops th { border: 1px solid #ccc; padding: 0.15em 0.5em; }
svg { font-family: monospace; font-size: 11px; background: #fcfcfc; }
svg .lane-line { stroke: #bbb; stroke-width: 1; }
svg .lane-head { font-weight: bold; font-size: 12px; }
svg .box { fill: #eef3fb; stroke: #7a99c7; stroke-width: 1; }
svg .ev:hover .box, svg .op:hover .box { stroke: #000; stroke-width: 2; }
svg .witness .box { fill: #fff4d6; stroke: #c98a00; stroke-width: 1.5; }
svg .unreadable .box { fill: #eee; stroke: #777; stroke-dasharray: 3 2; }
svg .offending .box { fill: #fde2e0; stroke: #b3261e; stroke-width: 3; }
svg .link { stroke: #3465a4; stroke-width: 1.5; fill: none; }
svg .link.backwards { stroke: #b3261e; stroke-dasharray: 5 3; }
svg .callout rect { fill: #fff; stroke: #b3261e; stroke-width: 1.5; }
svg .callout .spec { fill: #1a5fb4; } svg .callout .obs { fill: #b3261e; }
svg .window-span { fill: #fde2e0; opacity: 0.5; }
svg .op.context-op .box { fill: #eee; stroke: #aaa; }
svg .op.window-op .box { fill: #fbd0cc; stroke: #b3261e; stroke-width: 2; }
svg .op.open .box { stroke-dasharray: 4 3; }
svg .axis { fill: #666; font-size: 10px; }
"""

# Monospace at 11px: about this many pixels per character (labels are clipped to fit).
CHAR_PX: Final = 6.7


def esc(value: object) -> str:
    """Text or an attribute value, escaped (quotes too)."""
    return html.escape(str(value), quote=True)


def clip(text: str, chars: int) -> str:
    """At most ``chars`` characters, an ellipsis marking a cut."""
    if chars <= 1:
        return text[:max(chars, 0)]
    return text if len(text) <= chars else text[:chars - 1] + "\u2026"


def fit(text: str, width_px: float) -> str:
    return clip(text, int(width_px / CHAR_PX))


def wrap(text: str, chars: int, max_lines: int) -> list[str]:
    """``text`` cut into lines of at most ``chars`` (at spaces where it can), at most
    ``max_lines`` of them (the last one clipped)."""
    out: list[str] = []
    rest = " ".join(text.split())
    while rest and len(out) < max_lines:
        if len(rest) <= chars:
            out.append(rest)
            rest = ""
            break
        cut = rest.rfind(" ", 0, chars + 1)
        cut = cut if cut > chars // 3 else chars
        out.append(rest[:cut])
        rest = rest[cut:].lstrip()
    if rest and out:
        out[-1] = clip(out[-1] + " " + rest, chars)
    return out


class Svg:
    """An SVG drawing as a list of elements; every text and attribute value escaped."""

    def __init__(self, width: float, height: float, label: str) -> None:
        self.width = width
        self.height = height
        self.label = label
        self.parts: list[str] = []

    @staticmethod
    def attrs(**kw: object) -> str:
        """``class_`` -> ``class``, ``data_x`` -> ``data-x``; None values left out."""
        out = []
        for k, v in kw.items():
            if v is None:
                continue
            name = k.rstrip("_").replace("_", "-")
            out.append(f' {name}="{esc(v)}"')
        return "".join(out)

    def open_group(self, title: str | None = None, **kw: object) -> None:
        self.parts.append(f"<g{self.attrs(**kw)}>")
        if title is not None:
            self.parts.append(f"<title>{esc(title)}</title>")

    def close_group(self) -> None:
        self.parts.append("</g>")

    def rect(self, x: float, y: float, w: float, h: float, **kw: object) -> None:
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 1):.1f}" '
                          f'height="{h:.1f}" rx="3"{self.attrs(**kw)}/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, **kw: object) -> None:
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"'
                          f"{self.attrs(**kw)}/>")

    def arrow(self, x1: float, y1: float, x2: float, y2: float, title: str,
              **kw: object) -> None:
        """A causal link, an arrowhead at its receiving end."""
        self.parts.append(f'<path d="M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}" '
                          f'marker-end="url(#arrowhead)"{self.attrs(**kw)}>'
                          f"<title>{esc(title)}</title></path>")

    def text(self, x: float, y: float, content: str, **kw: object) -> None:
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}"{self.attrs(**kw)}>'
                          f"{esc(content)}</text>")

    def render(self) -> str:
        defs = ('<defs><marker id="arrowhead" viewBox="0 0 10 10" refX="9" refY="5" '
                'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
                '<path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>')
        return (f'<div class="scroll"><svg xmlns="http://www.w3.org/2000/svg" '
                f'width="{self.width:.0f}" height="{self.height:.0f}" '
                f'viewBox="0 0 {self.width:.0f} {self.height:.0f}" role="img" '
                f'aria-label="{esc(self.label)}">{defs}{"".join(self.parts)}</svg></div>')


def facts(rows: Iterable[tuple[str, str]]) -> str:
    """A definition list of (name, value) pairs."""
    body = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    return f'<dl class="facts">{body}</dl>'


def page(title: str, body: Iterable[str]) -> str:
    """The whole document: inline CSS, no script, nothing fetched."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; img-src data:\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def write_page(path: str, text: str) -> None:
    """Write the page in one piece: a temporary file beside ``path``, renamed over it.
    Raises OSError (the caller names the file)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0o022)  # mkstemp makes 0600; a report is as readable as any file
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
