"""``trace follow DIR... --web HOST:PORT``: the follower with pages of its own.

The same pages every server has (impl/web/pages.py ``Site``: the header, the JSON twin
under ``/api/v1``, ``/metrics``, ``/healthz``), built from one view:

    /follower (also /)   events checked, files followed, lag, findings, verdict
    /metrics             revivify_follower_* (``FollowerMetrics``)

It lives in the CLI, the one part of impl/ that runs the checker (the checker never
imports impl): the page skeleton, the app and hypercorn's trio worker are impl/web's, so
the follower's page is a server's page in look and behaviour and nothing of the web stack
is written twice. impl/main.py hands this module to checker/cli.py's ``trace_main`` for
``--web`` (``WebFront``); impl/web does not know the checker.

Threads. The web server is a task of this process's trio run; ``Follower.poll`` is CPU
work (a first poll over a day of traces takes minutes) and runs in a worker thread, one
poll at a time, so pages answer while it reads. The follower's objects are touched by that
thread only while a poll runs; findings it tells go to a list the trio task takes after the
poll returns, and the pages read only ``Snapshot``, a plain record the trio task replaces
between polls. So no page sees a poll half done, and nothing needs a lock.

Lag: ``lag_seconds`` is now minus the wall clock of the newest trace line read (the clock
of the machine that wrote it; all local here). While servers write it is how far behind
the follower reads; on an idle cluster it grows with the idleness, which ``idle_seconds``
(since a poll last found a file grown) tells apart.

The verdict shown is the follower's so far: VIOLATIONS once a finding of severity
violation or error was told (and not withdrawn: checker/follow.py says when a global
finding can be), CLEAN otherwise (warnings allowed, as ``trace check``'s exit 0). The
verdict printed when the process ends is ``trace check``'s on the files as they are
(``Follower.finish``).
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from revivify.checker.follow import Follower
from revivify.checker.keys import Violation
from revivify.checker.replay import DEFAULT_MAX_FRONTIER
from revivify.checker.report import Report

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric
    from starlette.applications import Starlette
    from starlette.requests import Request

# Findings shown on the page (the newest first); the count is always whole.
MAX_SHOWN: Final = 500
BAD: Final = ("violation", "error")


@attrs.frozen
class Snapshot:
    """What the pages show, as of the end of the last poll."""

    paths: tuple[str, ...]
    started_at: float  # time.time() of the start
    polls: int = 0
    events: int = 0
    files: int = 0
    newest_wall_ns: int = 0
    last_growth: float = 0.0  # time.time() of the last poll that found a file grown
    # Every finding told, each as last told (a withdrawn one replaces its first telling)
    findings: tuple[Violation, ...] = ()

    def verdict(self) -> str:
        return "VIOLATIONS" if any(v.severity in BAD for v in self.findings) else "CLEAN"

    def lag_seconds(self, now: float) -> float | None:
        if not self.newest_wall_ns:
            return None
        return max(0.0, now - self.newest_wall_ns / 1e9)

    def by_kind(self) -> dict[str, int]:
        """Findings standing (not withdrawn), by kind."""
        out: dict[str, int] = {}
        for v in self.findings:
            if v.severity != "withdrawn":
                out[v.kind] = out.get(v.kind, 0) + 1
        return out

    def document(self, now: float) -> dict[str, Any]:
        """The page's document (and ``/api/v1/follower``)."""
        lag = self.lag_seconds(now)
        shown = sorted(self.findings, key=lambda v: (v.file, v.line, v.kind))[:MAX_SHOWN]
        return {
            "verdict": self.verdict(),
            "paths": list(self.paths),
            "events_checked": self.events,
            "files": self.files,
            "polls": self.polls,
            "lag_seconds": None if lag is None else round(lag, 3),
            "idle_seconds": round(now - (self.last_growth or self.started_at), 3),
            "uptime_seconds": round(now - self.started_at, 1),
            "findings_total": len(self.findings),
            "findings_by_kind": self.by_kind(),
            "findings": [{"kind": v.kind, "severity": v.severity,
                          "where": f"{v.file}:{v.line}" if v.line else (v.file or v.subject),
                          "file": v.file, "line": v.line, "subject": v.subject,
                          "node": v.node, "tablet": v.tablet, "message": v.message,
                          "also": list(v.also)} for v in shown],
        }


@attrs.define
class Watch:
    """A ``Follower`` polled in a worker thread, and the snapshot its pages read."""

    fol: Follower
    tell: Callable[[Violation], None] | None = None
    snapshot: Snapshot = attrs.field(init=False)
    # Told by the follower during a poll (the worker thread appends, the trio task takes).
    _told: list[Violation] = attrs.field(init=False, factory=list)
    _findings: dict[tuple[str, str], Violation] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        self.fol.on_finding = self._told.append
        self.snapshot = Snapshot(tuple(self.fol.paths), time.time())

    async def poll(self) -> bool:
        """One poll in a worker thread; then the findings it told are told on (to
        ``tell``, in the trio thread) and the snapshot replaced. Whether a file grew."""
        grew = await trio.to_thread.run_sync(self.fol.poll)
        self._take()
        now = time.time()
        s = self.snapshot
        self.snapshot = attrs.evolve(
            s, polls=s.polls + 1, events=self.fol.replayer.events,
            files=len(self.fol.tails), newest_wall_ns=self.fol.newest_wall_ns,
            last_growth=now if grew else s.last_growth,
            findings=tuple(self._findings.values()))
        return grew

    def _take(self) -> None:
        told, self._told[:] = list(self._told), []
        for v in told:
            self._findings[v.identity()] = v
            if self.tell is not None:
                self.tell(v)


# ---------------------------------------------------------------------------- metrics


class FollowerMetrics:
    """The follower's registry: every family read from the snapshot at scrape time (as a
    server's state gauges: impl/observe/metrics.py), so nothing can drift from the page."""

    def __init__(self, watch: Watch) -> None:
        from prometheus_client import CollectorRegistry

        from revivify.impl.observe.families import SnapshotCollector

        self.watch = watch
        self.registry: CollectorRegistry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnapshotCollector(self._collect))

    def _collect(self) -> Iterable[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from revivify.impl.observe.metrics import gauge

        s = self.watch.snapshot
        now = time.time()
        yield CounterMetricFamily("revivify_follower_events_checked",
                                  "Trace events replayed through the spec so far",
                                  value=s.events)
        yield CounterMetricFamily("revivify_follower_polls",
                                  "Polls of the trace files", value=s.polls)
        yield gauge("revivify_follower_files", "Trace files followed", None,
                    {"": float(s.files)})
        lag = s.lag_seconds(now)
        yield gauge("revivify_follower_lag_seconds",
                    "Now minus the wall clock of the newest trace line read (-1: none yet)",
                    None, {"": -1.0 if lag is None else lag})
        yield gauge("revivify_follower_idle_seconds",
                    "Seconds since a poll last found a trace file grown", None,
                    {"": now - (s.last_growth or s.started_at)})
        yield gauge("revivify_follower_findings", "Findings told and standing, by kind",
                    "kind", {k: float(n) for k, n in s.by_kind().items()})
        verdict = GaugeMetricFamily("revivify_follower_clean",
                                    "1 while the verdict so far is CLEAN, 0 on VIOLATIONS")
        verdict.add_metric([], 1.0 if s.verdict() == "CLEAN" else 0.0)
        yield verdict

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


# ---------------------------------------------------------------------------- the app


def follower_app(watch: Watch) -> Starlette:
    from revivify.impl.web.pages import Page, Site, build_app

    async def view(request: Request) -> dict[str, Any]:
        return watch.snapshot.document(time.time())

    def healthz() -> tuple[bool, str]:
        s = watch.snapshot
        if not s.polls:
            return False, "starting: the first poll of the trace files is running"
        return True, f"following {s.files} files: {s.verdict()}"

    return build_app(Site(
        "follower", lambda: " ".join(watch.snapshot.paths)[:200],
        [Page("/follower", "follower.html", view, "Follower"),
         Page("/", "follower.html", view, None)],
        FollowerMetrics(watch), healthz))


async def _serve(watch: Watch, host: str, port: int, interval: float,
                 until_idle: float | None, progress: Callable[[str], None] | None,
                 progress_seconds: float) -> None:
    from revivify.impl.web.serve import serve_web

    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve_web, follower_app(watch), host, port)
        # The line scripts wait for (impl/cli/cluster.py), as a server's web line.
        print(f"revivify follower web on http://{bound}", flush=True)

        async def on_signals() -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(on_signals)
        last = tick = time.monotonic()
        while True:
            # Shielded: a signal ends the loop between polls, never inside one (the
            # worker thread could not be stopped anyway, and the follower must stay whole
            # for ``finish``).
            with trio.CancelScope(shield=True):
                grew = await watch.poll()
            now = time.monotonic()
            if grew:
                last = now
            elif until_idle is not None and now - last >= until_idle:
                break
            if progress is not None and now - tick >= progress_seconds:
                tick = now
                s = watch.snapshot
                progress(f"trace follow: {s.files} files, {s.events:,} events, "
                         f"{len(s.findings)} findings, idle {now - last:.0f} s")
            await trio.sleep(interval)
        nursery.cancel_scope.cancel()


def parse_bind(text: str) -> tuple[str, int]:
    """``--web``'s HOST:PORT (port 0: any free one); ValueError naming what is wrong."""
    from revivify.impl.rpc.address import parse_address

    return parse_address(text, allow_any_port=True)


def _os_error(exc: BaseException) -> OSError | None:
    """The OSError ``exc`` is or holds (trio's nurseries wrap a failed bind in groups)."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _os_error(inner)
            if found is not None:
                return found
    return None


def follow_web(paths: list[str], tell: Callable[[Violation], None], host: str, port: int,
               until_idle: float | None = None, interval: float = 0.15,
               max_frontier: int = DEFAULT_MAX_FRONTIER,
               progress: Callable[[str], None] | None = None,
               progress_seconds: float = 5.0) -> Report:
    """Follow ``paths`` with the pages served on HOST:PORT (0: any free port; the bound
    address is printed) until SIGINT/SIGTERM or ``until_idle``; then the final verdict.
    A port that cannot be bound raises OSError."""
    watch = Watch(Follower(paths, max_frontier=max_frontier), tell)
    try:
        trio.run(functools.partial(_serve, watch, host, port, interval, until_idle,
                                   progress, progress_seconds))
    except BaseExceptionGroup as group:
        err = _os_error(group)
        if err is None:
            raise
        raise err from None
    watch.fol.on_finding = tell
    return watch.fol.finish()


__all__ = ["FollowerMetrics", "Snapshot", "Watch", "follow_web", "follower_app", "parse_bind"]
