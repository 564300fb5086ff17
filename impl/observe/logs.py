"""A server's log: what the operator reads on disk and on the ``/logs`` page.

Where lines go (``configure_logging``, the flags of ``add_log_flags``, shared by ``tserver
run`` and ``master run``):

* the log file, ``--log-file`` (default ``FS_ROOT/logs/<kind>.log``, ``kind`` tserver or
  master), every line at ``--log-level`` (default INFO) and above, in ``--log-format``
  (``text``, or ``json``: one JSON object per line), rotated by size (``--log-max-mb``,
  keeping ``--log-files`` old files: ``<kind>.log.1`` is the newest of them);
* stderr, WARNING and above only (what needs a human; ``cluster start`` appends a server's
  stdout and stderr to ``DIR/<name>.log``, next to the "listening" line and any crash);
  with ``--log-file -`` there is no file and stderr gets every line at ``--log-level``;
* the tail (``TailHandler``, ``tail_handler()``): the last lines in memory, at the file's
  level and in its format, for the ``/logs`` page, which never reads the file (it may have
  been rotated away) and never blocks the run loop on disk.

INFO is one line per event an operator cares about (start-up, elections won and lost,
leader and config changes, copies, deletions, the master's readiness, tables, heals,
tablet servers dead or live again), never one per write: a write's path logs nothing.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import logging
import logging.handlers
import os
import sys

import attrs

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TAIL_LINES = 1000
DEFAULT_MAX_MB = 64.0
DEFAULT_FILES = 5


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


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, and the
    exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC)
            .isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def add_log_flags(parser: argparse.ArgumentParser, kind: str) -> None:
    """The log flags of a server command (``kind``: tserver or master, the file's name).
    Values are strings, checked by ``configure_logging`` (a one-line error, exit 2)."""
    parser.add_argument("--log-level", default="INFO",
                        help="lowest level logged: DEBUG, INFO, WARNING, ERROR (default INFO)")
    parser.add_argument("--log-format", default="text",
                        help="text (default) or json (one object per line)")
    parser.add_argument("--log-file", default=None,
                        help=f"the log file (default FS_ROOT/logs/{kind}.log; '-': none, "
                             "every line to stderr); stderr gets WARNING and above")
    parser.add_argument("--log-max-mb", default=str(DEFAULT_MAX_MB),
                        help=f"rotate the log file past this size (default {DEFAULT_MAX_MB:g})")
    parser.add_argument("--log-files", default=str(DEFAULT_FILES),
                        help=f"rotated files kept besides the current one (default "
                             f"{DEFAULT_FILES})")


@attrs.frozen
class LogSettings:
    level: int
    json: bool
    path: str | None  # None: no file, stderr gets every line
    max_bytes: int
    backups: int


def log_settings(args: argparse.Namespace, fs_root: str, kind: str) -> LogSettings:
    """The flags checked (ValueError with a one-line message naming the flag)."""
    level = logging.getLevelNamesMapping().get(str(args.log_level).upper())
    if level is None:
        raise ValueError(f"--log-level: unknown level {args.log_level!r} (DEBUG, INFO, "
                         "WARNING, ERROR, CRITICAL)")
    if args.log_format not in ("text", "json"):
        raise ValueError(f"--log-format: {args.log_format!r} is not text or json")
    try:
        max_mb = float(args.log_max_mb)
        backups = int(args.log_files)
    except ValueError:
        raise ValueError(f"--log-max-mb and --log-files must be numbers (got "
                         f"{args.log_max_mb!r}, {args.log_files!r})") from None
    if not max_mb > 0 or backups < 1:
        raise ValueError("--log-max-mb must be positive and --log-files at least 1")
    path = args.log_file
    if path is None:
        path = os.path.join(fs_root, "logs", f"{kind}.log")
    return LogSettings(level=level, json=args.log_format == "json",
                       path=None if path == "-" else path,
                       max_bytes=max(1, int(max_mb * (1 << 20))), backups=backups)


_tail: TailHandler | None = None
_installed: list[logging.Handler] = []


def tail_handler() -> TailHandler | None:
    """The process's log tail (None before ``configure_logging``): what ``/logs`` shows."""
    return _tail


def configure_logging(settings: LogSettings) -> None:
    """Install the handlers on the root logger (replacing those a previous call installed):
    the rotating file, stderr and the tail. OSError if the file cannot be opened."""
    global _tail
    formatter: logging.Formatter = JsonFormatter() if settings.json \
        else logging.Formatter(TEXT_FORMAT)
    handlers: list[logging.Handler] = []
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(formatter)
    if settings.path is not None:
        os.makedirs(os.path.dirname(settings.path) or ".", exist_ok=True)
        file = logging.handlers.RotatingFileHandler(
            settings.path, maxBytes=settings.max_bytes, backupCount=settings.backups,
            encoding="utf-8")
        file.setFormatter(formatter)
        handlers.append(file)
        stderr.setLevel(max(logging.WARNING, settings.level))
    handlers.append(stderr)
    tail = TailHandler(TAIL_LINES)
    tail.setFormatter(formatter)
    handlers.append(tail)
    root = logging.getLogger()
    remove_logging()
    _installed[:] = handlers
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(settings.level)
    _tail = tail


def remove_logging() -> None:
    """Remove (and close) the handlers ``configure_logging`` installed; the tail goes too."""
    global _tail
    root = logging.getLogger()
    for old in _installed:
        root.removeHandler(old)
        old.close()
    _installed.clear()
    _tail = None


def setup_logging(args: argparse.Namespace, fs_root: str, kind: str) -> str | None:
    """``log_settings`` then ``configure_logging``: what a server's ``main`` calls after
    parsing. Returns the log file's path (None: stderr only); ValueError, one line, for a
    bad flag or a file that cannot be opened."""
    settings = log_settings(args, fs_root, kind)
    try:
        configure_logging(settings)
    except OSError as exc:
        raise ValueError(f"--log-file: cannot open {settings.path}: {exc}") from None
    return settings.path


__all__ = ["JsonFormatter", "LogSettings", "TailHandler", "add_log_flags",
           "configure_logging", "log_settings", "remove_logging", "setup_logging", "tail_handler"]
