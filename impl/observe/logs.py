"""A server's log: what the operator reads on disk and on the ``/logs`` page.

``TailHandler`` keeps the last lines formatted in memory, so ``/logs`` never reads the file
(which may have been rotated away) and never blocks the run loop on disk.
"""

from __future__ import annotations

import collections
import logging


class TailHandler(logging.Handler):
    """The last ``capacity`` formatted records, newest last."""

    def __init__(self, capacity: int = 1000) -> None:
        super().__init__()
        self._lines: collections.deque[str] = collections.deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(self.format(record))
        except Exception:  # logging must never raise into the server
            self.handleError(record)

    def tail(self, n: int) -> list[str]:
        """The newest ``n`` lines (fewer if fewer were logged), oldest first."""
        if n <= 0:
            return []
        lines = list(self._lines)
        return lines[-n:]


def tail_handler() -> TailHandler | None:
    """The process's tail of its log (the first TailHandler on the root logger), which
    ``/logs`` shows; None when none is installed (then the page says so)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, TailHandler):
            return handler
    return None
