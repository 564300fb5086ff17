"""impl/observe/families.py: revivify's own counters and histograms, exported in the
Prometheus text format that prometheus_client's parser reads back."""

from __future__ import annotations

import pytest
from observe_helpers import parse, value
from prometheus_client import CollectorRegistry, generate_latest

from revivify.impl.observe.families import NULL, Families
from revivify.impl.observe.metrics import OFF, ServerMetrics


def test_histogram_buckets_are_le_and_cumulative_with_sum_and_count() -> None:
    registry = CollectorRegistry()
    f = Families(registry, True)
    h = f.histogram("t_seconds", "a histogram", (0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(v)
    s = parse(generate_latest(registry))
    assert value(s, "t_seconds_bucket", le="0.1") == 2  # 0.1 <= 0.1 counts in le=0.1
    assert value(s, "t_seconds_bucket", le="1.0") == 4
    assert value(s, "t_seconds_bucket", le="+Inf") == 5
    assert value(s, "t_seconds_count") == 5
    assert value(s, "t_seconds_sum") == pytest.approx(8.65)


def test_counters_by_label_exist_at_zero_and_count() -> None:
    registry = CollectorRegistry()
    f = Families(registry, True)
    by_mode = f.counters("t_deletions_total", "by mode", "mode", ("A", "B"))
    by_mode["B"].inc()
    by_mode["B"].inc(2)
    calls = f.labelled_counter("t_calls_total", "learnt labels", ("method", "status"))
    assert calls is not None
    calls.labels("M", "OK").inc()
    s = parse(generate_latest(registry))
    assert value(s, "t_deletions_total", mode="A") == 0
    assert value(s, "t_deletions_total", mode="B") == 3
    assert value(s, "t_calls_total", method="M", status="OK") == 1


def test_a_name_twice_is_refused_and_off_counts_nothing() -> None:
    f = Families(CollectorRegistry(), True)
    f.counter("t_total", "once")
    with pytest.raises(ValueError, match="twice"):
        f.counter("t_total", "twice")
    off = Families(CollectorRegistry(), False)
    assert off.counter("t_total", "") is NULL and off.labelled_counter("x", "", ()) is None
    assert parse(OFF.exposition()) == {}


def test_every_server_family_is_exported_once_and_parses() -> None:
    m = ServerMetrics()
    m.rpc.method("Data.Write").ok.inc()
    m.rpc.method("Data.Write").status("tserver.not_leader").inc()
    m.rpc.method("Data.Write").latency.observe(0.002)
    s = parse(m.exposition())
    assert value(s, "revivify_rpc_server_calls_total", method="Data.Write", status="OK") == 1
    assert value(s, "revivify_rpc_server_calls_total", method="Data.Write",
                 status="tserver.not_leader") == 1
    assert value(s, "revivify_rpc_server_call_seconds_bucket", method="Data.Write",
                 le="0.0025") == 1
    names = {name for name, _ in s}
    for family in ("revivify_wal_fsync_seconds_count", "revivify_raft_elections_won_total",
                   "revivify_copy_sessions_finished_total", "revivify_heartbeats_sent_total",
                   "revivify_tablet_deletions_total"):
        assert family in names, family


def test_the_rpc_server_counts_calls_by_method_and_status_unknown_methods_as_one() -> None:
    import msgspec
    import trio
    import trio.testing

    from revivify.impl.rpc import (
        Service,
        UnknownMethod,
        WrongServerUuid,
        open_rpc_client,
        serve_rpc,
    )
    from revivify.impl.testing import MemoryNetwork
    from revivify.impl.tserver import api

    class Echo(msgspec.Struct):
        text: str

    async def echo(req: Echo, ctx: object) -> Echo:
        if req.text == "refuse":
            raise api.InvalidArgument("refused")
        return req

    metrics = ServerMetrics()

    async def main() -> None:
        import random

        net = MemoryNetwork(random.Random(0))
        service = Service("t")
        service.register("Echo", Echo, Echo, echo)
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: serve_rpc(
                service, "srv", "h1", 7050, network=net.host("h1"), metrics=metrics.rpc,
                task_status=task_status))
            async with open_rpc_client("h1", 7050, "srv", "cli", network=net.host("c"),
                                       app_errors=api.APP_ERRORS) as client:
                for _ in range(3):
                    await client.call("Echo", Echo("hi"), Echo)
                with pytest.raises(api.InvalidArgument):
                    await client.call("Echo", Echo("refuse"), Echo)
                for name in ("Nope1", "Nope2"):
                    with pytest.raises(UnknownMethod):
                        await client.call(name, Echo("x"), Echo)
            async with open_rpc_client("h1", 7050, "another", "cli", network=net.host("c"),
                                       app_errors=api.APP_ERRORS) as client:
                with pytest.raises(WrongServerUuid):  # garbage for another server: "?"
                    await client.call("Nope3", Echo("x"), Echo)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    s = parse(metrics.exposition())
    assert value(s, "revivify_rpc_server_calls_total", method="Echo", status="OK") == 3
    assert value(s, "revivify_rpc_server_calls_total", method="Echo",
                 status=api.InvalidArgument.code) == 1
    assert value(s, "revivify_rpc_server_calls_total", method="?",
                 status=UnknownMethod.code) == 2
    assert value(s, "revivify_rpc_server_calls_total", method="?",
                 status=WrongServerUuid.code) == 1
    assert value(s, "revivify_rpc_server_call_seconds_count", method="Echo") == 4
    assert not any(dict(labels).get("method", "").startswith("Nope") for _, labels in s)


def test_the_client_and_the_cli_never_load_prometheus_client() -> None:
    """The RPC layer counts (impl/rpc/server.py), the client imports it: the export side,
    and prometheus_client with it, is loaded only by a server that starts with metrics."""
    import subprocess
    import sys

    script = ("import sys, revivify.impl.client, revivify.impl.cli.main, "
              "revivify.impl.rpc.server, revivify.impl.storage.wal; "
              "from revivify.impl.observe.metrics import OFF; OFF.exposition(); "
              "print(sorted(m for m in sys.modules if m.startswith('prometheus_client')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]"
