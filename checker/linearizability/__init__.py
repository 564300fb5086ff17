"""revivify.checker.linearizability: is a recorded client history linearizable?

``revivify history check FILE --model register|kv`` reads a history (``formats``: Jepsen's
log lines or the project's JSON Lines), pairs its events into operations (``history``),
splits it per key and searches each key's operations for a linearization (``wgl.search``:
Wing & Gong's algorithm with Lowe's memoization, as in Porcupine and Knossos), and for a
key that has none finds the smallest window of the history that fails on its own
(``check``). Pure: the caller reads the file and prints; nothing here imports revivify.impl.

    events = read_events(path, lines, "jepsen", keyed=False)
    result = check_history(pair_events(path, events), timeout=60.0)
"""

from revivify.checker.linearizability.check import (
    UNWRITTEN,
    CheckResult,
    CheckTimeout,
    KeyResult,
    Window,
    WindowOp,
    check_history,
    smallest_window,
    to_search_ops,
)
from revivify.checker.linearizability.formats import FORMATS, Format, read_events
from revivify.checker.linearizability.history import (
    Event,
    History,
    HistoryError,
    Operation,
    pair_events,
    show,
)
from revivify.checker.linearizability.wgl import SearchOp, SearchResult, search

__all__ = [
    "FORMATS",
    "UNWRITTEN",
    "CheckResult",
    "CheckTimeout",
    "Event",
    "Format",
    "History",
    "HistoryError",
    "KeyResult",
    "Operation",
    "SearchOp",
    "SearchResult",
    "Window",
    "WindowOp",
    "check_history",
    "pair_events",
    "read_events",
    "search",
    "show",
    "smallest_window",
    "to_search_ops",
]
