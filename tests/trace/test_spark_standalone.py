"""The Spark engine on a real Spark standalone cluster (issue 10), not only on ``local[*]``.

One master and two workers (1 core each) run as processes from the pyspark installation,
bound to 127.0.0.1 on free ports (``revivify.checker.spark_cluster``). The checker runs as
the command a user types, ``revivify trace validate PATH --engine spark --spark-master
spark://127.0.0.1:P``, in its own process (the driver; this process may already hold a
``local[2]`` SparkContext, and there can be only one). Its Python workers run this
interpreter (``PYSPARK_PYTHON``); the driver ships the checker's code (``ship_package``).
The client's Spark configuration comes from the cluster's ``spark-defaults.conf``
(``SPARK_CONF_DIR``): a job starts only once both executors have registered, so both get
tasks.

Each run must give the local engine's verdict and findings, and the master's and workers'
JSON UIs and the executors' logs must show that the application had one executor on each
worker and that both ran tasks. The explorer's Spark engine (``revivify explore --engine
spark --master spark://...``) runs there too, with the single process's counts on small
bounds. ``make check-spark-cluster`` runs just this file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from revivify.checker.explore import explore
from revivify.checker.local import check_paths
from revivify.checker.spark_cluster import (
    ClusterStartError,
    StandaloneCluster,
    java_binary,
    listening,
    start,
)
from revivify.spec import default_spec
from revivify.spec.actions import Bounds

from .conftest import TRACES

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

# Bad cases whose nodes' UUIDs differ, so that checked together they report only their own
# findings: replay (DoubleVote, StateMismatch, GuardFailed), the global checks
# (TwoLeaders, CommitTermMismatch) and the majority and causality checks.
BAD = [TRACES / "bad" / c for c in (
    "vote-twice-after-restart", "merge-drops-vote", "damaged-wal-started-ready",
    "two-leaders-one-term", "batched-commit-two-terms", "leader-without-majority",
    "commit-without-majority", "append-before-leader")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    if java_binary() is None:
        pytest.skip("no Java runtime (java not on PATH, JAVA_HOME unset): a Spark standalone "
                    "cluster needs one ('make java' installs it)")
    log_dir = tmp_path_factory.mktemp("spark-standalone")
    try:
        # 1g a worker: Spark's default executor memory, so a client without the cluster's
        # spark-defaults.conf still gets executors.
        c = start(workers=2, cores=1, memory="1g", log_dir=str(log_dir),
                  python=sys.executable)
    except ClusterStartError as e:
        failed = str(e)
    else:
        failed = ""
    if failed:  # outside the except block: the message alone, no exception chain
        pytest.fail(f"the Spark standalone cluster did not start (logs in {log_dir}):\n"
                    f"{failed}", pytrace=False)
    try:
        yield c
    finally:
        c.stop()


def _client_env(cluster: StandaloneCluster) -> dict[str, str]:
    """A Spark client's environment for this cluster: its spark-defaults.conf, and this
    interpreter for the driver and the executors' Python workers."""
    return {**os.environ, "SPARK_CONF_DIR": cluster.client_conf_dir,
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _validate(cluster: StandaloneCluster, paths: list[Path], *extra: str,
              flag: str = "--spark-master") -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Run the CLI against the cluster, and meanwhile the local engine on the same paths;
    check that both give the same verdict and findings. Returns (exit code, the JSON
    report, the master's entry for the application once completed)."""
    before = {a["id"] for a in cluster.apps()}
    env = _client_env(cluster)
    with subprocess.Popen([sys.executable, "-m", "revivify.impl.cli.main", "trace",
                           "validate", *map(str, paths), "--engine", "spark", flag,
                           cluster.master_url, "--json", "--quiet", *extra],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as proc:
        try:
            local = check_paths([str(p) for p in paths])
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    why = (f"exit {proc.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}\n"
           f"{cluster.log_tails(20)}")
    assert "Traceback" not in err, why
    try:
        report = json.loads(out)
    except ValueError:
        pytest.fail(f"no JSON report: {why}", pytrace=False)
    new = [a for a in cluster.apps() if a["id"] not in before]
    assert len(new) == 1, f"expected one new application on the master, got {new}\n{why}"
    app = cluster.wait_finished(new[0]["id"])

    assert proc.returncode == report["exit_code"] == local.exit_code()

    def key(f: dict[str, Any]) -> tuple[Any, ...]:
        return (f["kind"], f["severity"], f["subject"], f["file"], f["line"])

    assert sorted(map(key, report["findings"])) == sorted(
        key(v.to_json()) for v in local.findings.values())
    assert report["counts"] == dict(local.counts)
    local_json = local.to_json()
    for field in ("files", "events", "server_events", "keys", "frontier_sizes", "coverage"):
        assert report[field] == local_json[field], field
    return proc.returncode, report, app


def _assert_ran_on_both_workers(cluster: StandaloneCluster, app: dict[str, Any],
                                min_tasks: int) -> None:
    """One executor of the application on each worker (the workers' JSON UIs), each of which
    ran tasks (its own log)."""
    assert app["state"] == "FINISHED" and app["cores"] == 2, app
    deadline = time.monotonic() + 30
    # A worker lists an executor as finished once its process has exited (its log complete).
    while not all(any(e["appid"] == app["id"] for e in cluster.worker_state(w)
                      ["finishedexecutors"]) for w in cluster.workers):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    execs = cluster.executors(app["id"])
    assert {w: len(es) for w, es in execs.items()} == {w.name: 1 for w in cluster.workers}, (
        execs)
    tasks = cluster.tasks_run(app["id"])
    assert all(n > 0 for n in tasks.values()), f"a worker ran no task: {tasks}"
    assert sum(tasks.values()) >= min_tasks, tasks


def test_cluster_listens_on_loopback_only(cluster: StandaloneCluster) -> None:
    for d in [cluster.master, *cluster.workers]:
        addrs = listening(d.proc.pid)
        if addrs is None:
            pytest.skip("no /proc: cannot list the daemons' sockets")
        assert addrs, f"{d.name} listens nowhere?"
        assert {ip for ip, _ in addrs} == {"127.0.0.1"}, (d.name, addrs)
    workers = cluster.state()["workers"]
    assert len(workers) == 2 and {w["host"] for w in workers} == {"127.0.0.1"}


def test_good_corpus_on_the_cluster(cluster: StandaloneCluster) -> None:
    """The spec walks, files plan (the default): each task opens its nodes' files."""
    paths = [TRACES / "spec-walks"]
    code, report, app = _validate(cluster, paths)
    assert code == 0 and report["engine"] == "spark" and not report["findings"], report
    _assert_ran_on_both_workers(cluster, app, min_tasks=report["timings"]["tasks"])


def _check_bad(cluster: StandaloneCluster, *extra: str) -> None:
    code, report, app = _validate(cluster, BAD, *extra, flag="--master")
    assert code == 1
    for case in BAD:
        expected = json.loads((case / "expected.json").read_text())
        # A finding names its kind and the kinds folded into it at the same line ("also").
        kinds = {k for f in report["findings"] if Path(f["file"]).parent == case
                 for k in (f["kind"], *f["also"])}
        assert expected["kind"] in kinds, (case.name, kinds)
        if "at" in expected:
            assert any(expected["kind"] in (f["kind"], *f["also"]) and Path(f["file"]).name ==
                       expected["at"]["file"] and f["line"] == expected["at"]["line"]
                       for f in report["findings"]), case.name
    _assert_ran_on_both_workers(cluster, app, min_tasks=report["timings"]["tasks"])


def test_bad_traces_on_the_cluster(cluster: StandaloneCluster) -> None:
    """Bad cases, files plan; the historical ``--master`` spelling."""
    _check_bad(cluster)


@pytest.mark.slow
def test_bad_traces_on_the_cluster_dataframe_plan(cluster: StandaloneCluster) -> None:
    """The dataframe plan: every line is shuffled between the two executors, and the global
    checks run as Spark aggregations (more shuffles). About 30 to 45 s on two cores, so in
    ``make soak``, not ``make test`` (``make check-spark-cluster PYTEST_FLAGS='-m "slow or
    not slow"'`` runs it too)."""
    _check_bad(cluster, "--plan", "dataframe")


# Crashes and wipes with one term and no entry: a few hundred states, eight levels, every
# level two Spark jobs (issue 34: "tested on local[2] and on the standalone Spark cluster").
EXPLORE_BOUNDS = Bounds(max_term=1, max_index=0, max_crashes=1, max_wipes=1, max_requests=0)


def test_the_explorer_on_the_cluster(cluster: StandaloneCluster) -> None:
    """``revivify explore --engine spark --master spark://...`` as a user types it: the
    same states, transitions, depth, frontier by level and coverage as one process, and
    the levels' tasks ran on both workers."""
    before = {a["id"] for a in cluster.apps()}
    b = EXPLORE_BOUNDS
    argv = ["--max-term", str(b.max_term), "--max-index", str(b.max_index),
            "--crashes", str(b.max_crashes), "--wipes", str(b.max_wipes),
            "--requests", str(b.max_requests)]
    run = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", "explore",
                          *argv, "--engine", "spark", "--master", cluster.master_url,
                          "--json", "--quiet"],
                         capture_output=True, text=True, env=_client_env(cluster),
                         timeout=300, check=False)
    why = (f"exit {run.returncode}\nstdout:\n{run.stdout[-3000:]}\nstderr:\n"
           f"{run.stderr[-3000:]}\n{cluster.log_tails(20)}")
    assert run.returncode == 0 and "Traceback" not in run.stderr, why
    report = json.loads(run.stdout)
    one = explore(default_spec(), b)
    assert report["engine"] == "spark" and report["complete"] and one.complete, report
    assert (report["distinct_states"], report["transitions"], report["depth"],
            report["levels"], report["coverage"]) == (
        one.distinct_states, one.transitions, one.depth, list(one.levels), one.coverage)
    new = [a for a in cluster.apps() if a["id"] not in before]
    assert len(new) == 1, f"expected one new application on the master, got {new}\n{why}"
    app = cluster.wait_finished(new[0]["id"])
    _assert_ran_on_both_workers(cluster, app, min_tasks=2 * len(one.levels))
