"""The trace follower beside a running cluster (issue 33): ``cluster start --watch``, the
follower's page, its JSON twin and ``/metrics``, and the masters' home page's block.

* ``trace follow DIR --web 127.0.0.1:0`` alone, as a real process, on a known-bad case:
  the web line, the JSON twin, ``/metrics`` (parsed by prometheus_client's parser),
  ``/healthz``, the finding's kind the same as ``trace check`` gives; bad ``--web``
  values and a taken port are one line, exit 2.
* ``cluster start --watch`` on a small cluster (real processes, real TCP): the page in
  headless Chromium (tests/web/test_browser.py's fixture) and its twin say CLEAN with
  events checked; the master's home page shows that verdict and links to the page; a
  known-bad case's files copied into the watched traces directory turn the follower's
  verdict to VIOLATIONS with ``trace check``'s kind, on the page, the twin and
  ``/metrics``; ``cluster stop`` stops the follower too, which logs its final verdict.

Every wait polls with a generous deadline; no timing is asserted.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.common.by import By
from test_browser import Visitor, wait_for
from test_browser import browser as chromium  # noqa: F401 (the fixture, reused by name)

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "traces" / "bad" / "append-leaves-gap"  # a per-key finding: told at once
CLI = [sys.executable, "-m", "revivify.impl.cli.main"]
WEB_LINE = re.compile(r"revivify follower web on http://(\S+)")


def cli(*argv: str, expect: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=300,
                         check=False, stdin=subprocess.DEVNULL)
    assert out.returncode in expect, (argv, out.returncode, out.stdout[-2000:],
                                      out.stderr[-2000:])
    return out


def batch_kinds(path: Path) -> set[str]:
    """The kinds ``trace check`` finds in ``path`` (what the follower must find too)."""
    report = json.loads(cli("trace", "check", str(path), "--json", expect=(1,)).stdout)
    kinds = {f["kind"] for f in report["findings"] if f["severity"] == "violation"}
    assert kinds, report
    return kinds


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as page:
            return page.status, page.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def api(web: str) -> dict[str, Any]:
    status, body = get(f"http://{web}/api/v1/follower")
    assert status == 200, body
    doc: dict[str, Any] = json.loads(body)
    return doc


def metrics(web: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = get(f"http://{web}/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def api_when(web: str, ok: Callable[[dict[str, Any]], bool]
             ) -> Callable[[], dict[str, Any] | None]:
    """A probe for wait_for: the twin's document once ``ok`` holds of it."""
    def probe() -> dict[str, Any] | None:
        doc = api(web)
        return doc if ok(doc) else None
    return probe


def kinds_found(doc: dict[str, Any]) -> set[str]:
    return {k for f in doc["findings"] if f["severity"] == "violation"
            for k in (f["kind"], *f["also"])}


# ---------------------------------------------------------------------------- alone


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str, Path]]:
    """``trace follow DIR --web 127.0.0.1:0`` on an empty directory; (process, web, dir)."""
    watched = tmp_path / "traces"
    watched.mkdir()
    proc = subprocess.Popen([*CLI, "trace", "follow", str(watched), "--web", "127.0.0.1:0",
                             "--interval", "0.1", "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()  # the web line comes first, before any finding
        found = WEB_LINE.search(line)
        assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield proc, found.group(1), watched
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def test_follow_web_alone(follower: tuple[subprocess.Popen[str], str, Path]) -> None:
    proc, web, watched = follower
    wait_for("the first poll", 120, lambda: get(f"http://{web}/healthz")[0] == 200)
    doc = api(web)
    assert doc["verdict"] == "CLEAN" and doc["events_checked"] == 0 and doc["files"] == 0
    assert doc["lag_seconds"] is None
    want = batch_kinds(BAD)
    for f in sorted(BAD.glob("*.jsonl")):
        shutil.copy(f, watched / f.name)
    doc = wait_for("the copied case's finding", 120,
                   api_when(web, lambda d: want <= kinds_found(d)))
    assert doc["verdict"] == "VIOLATIONS" and doc["files"] == 3
    assert doc["events_checked"] > 0 and doc["lag_seconds"] > 0  # the case's lines are old
    finding = next(f for f in doc["findings"] if f["kind"] in want)
    assert finding["where"].startswith(str(watched)) and finding["message"]
    values = metrics(web)
    for kind in want:
        assert values[("revivify_follower_findings", (("kind", kind),))] >= 1
    assert values[("revivify_follower_events_checked_total", ())] == doc["events_checked"]
    assert values[("revivify_follower_files", ())] == 3
    assert values[("revivify_follower_clean", ())] == 0
    assert values[("revivify_follower_lag_seconds", ())] > 0
    status, page = get(f"http://{web}/follower")
    assert status == 200 and "VIOLATIONS" in page and next(iter(want)) in page
    assert "revivify follower" in page  # the servers' header (impl/web's base template)
    assert get(f"http://{web}/api/v1/nothing")[0] == 404
    proc.send_signal(signal.SIGTERM)  # the final verdict, as trace check's
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out
    assert "result: 1 violation(s)" in out or "violation(s)" in out.splitlines()[-1]


@pytest.mark.parametrize("bind, what", [
    ("nowhere", "no port"), ("127.0.0.1:http", "not a number"),
    ("127.0.0.1:70000", "port"), ("", "empty"),
])
def test_bad_web_bind_is_one_line(tmp_path: Path, bind: str, what: str) -> None:
    out = cli("trace", "follow", str(tmp_path), "--web", bind, "--until-idle", "1",
              expect=(2,))
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "--web" in lines[0] and what in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_taken_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = cli("trace", "follow", str(tmp_path), "--web", f"127.0.0.1:{port}",
                  "--until-idle", "1", expect=(2,))
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], out.stderr
    assert "in use" in lines[0].lower(), out.stderr


# ---------------------------------------------------------------------------- --watch


def test_cluster_start_watch(tmp_path: Path, chromium: webdriver.Chrome) -> None:  # noqa: F811
    root = tmp_path / "c"
    visit = Visitor(chromium, tmp_path / "screenshots")
    try:
        started = json.loads(cli("cluster", "start", "--root", str(root), "--num-masters",
                                 "1", "--num-tservers", "3", "--watch", "--json").stdout)
        f = started["follower"]
        assert f["alive"] and f["web"].startswith("http://127.0.0.1:")
        web = f["web"].removeprefix("http://")
        record = json.loads((root / "cluster.json").read_text())
        assert record["follower"]["web_port"] == int(web.rsplit(":", 1)[1])
        text = cli("cluster", "status", "--root", str(root)).stdout
        assert "follower" in text and f"http://{web}/follower" in text
        cli("table", "create", "t", "--root", str(root), "--tablets", "1", "--replicas",
            "3", "--deadline", "60")

        doc = wait_for("the follower checked the servers' events", 120,
                       api_when(web, lambda d: d["events_checked"] > 0))
        assert doc["verdict"] == "CLEAN", doc["findings"]
        assert doc["paths"] == [str(root / "traces")]
        visit.open(f"http://{web}/follower", "follower-clean")
        assert visit.text("#verdict") == "CLEAN"
        assert int(visit.text("#events")) > 0
        visit.open(f"http://{web}/api/v1/follower", "follower-json")

        master_web = started["masters"][0]["web"]
        visit.open(f"{master_web}/", "master-home")
        assert visit.text("#follower").startswith("CLEAN"), visit.text("#follower")
        visit.driver.find_element(By.CSS_SELECTOR, "#follower a").click()
        visit.check("follower-from-master")
        assert visit.driver.current_url == f"http://{web}/follower"
        status, body = get(f"{master_web}/api/v1/")
        assert status == 200 and json.loads(body)["follower"]["verdict"] == "CLEAN"

        want = batch_kinds(BAD)
        traces = root / "traces"
        for path in sorted(BAD.glob("*.jsonl")):
            shutil.copy(path, traces / path.name)
        doc = wait_for("the bad case's finding", 120,
                       api_when(web, lambda d: want <= kinds_found(d)))
        assert doc["verdict"] == "VIOLATIONS"
        values = metrics(web)
        assert all(values[("revivify_follower_findings", (("kind", k),))] >= 1 for k in want)
        visit.open(f"http://{web}/follower", "follower-violations")
        assert visit.text("#verdict") == "VIOLATIONS"
        shown = {row.get_attribute("data-kind")
                 for row in chromium.find_elements(By.CSS_SELECTOR, "#findings tr[data-kind]")}
        assert want <= shown
        wait_for("the master's page shows VIOLATIONS", 60,
                 lambda: json.loads(get(f"{master_web}/api/v1/")[1])["follower"]["verdict"]
                 == "VIOLATIONS")
    finally:
        if (root / "cluster.json").exists():
            cli("cluster", "stop", "--root", str(root), expect=(0, 2))
    after = json.loads(cli("cluster", "status", "--root", str(root), "--json",
                           expect=(1,)).stdout)
    assert after["follower"]["alive"] is False
    log = (root / "follower.log").read_text()
    assert "result:" in log and "violation(s)" in log, log[-2000:]
    # --watch is a new cluster's: a stopped cluster started without it keeps its follower
    # (on its port), and one that never had a follower refuses it.
    again = json.loads(cli("cluster", "start", "--root", str(root), "--json").stdout)
    try:
        assert again["follower"]["alive"] and again["follower"]["web"] == f"http://{web}"
        wait_for("the restarted follower re-read everything", 120,
                 api_when(web, lambda d: want <= kinds_found(d)))
    finally:
        cli("cluster", "stop", "--root", str(root))


def test_watch_refused_on_a_cluster_without_a_follower(tmp_path: Path) -> None:
    """Its masters were never told of a follower (a flag of theirs): one line, exit 2,
    before anything starts."""
    root = tmp_path / "c"
    root.mkdir()
    (root / "cluster.json").write_text(json.dumps({
        "version": 1, "tservers": [],
        "masters": [{"name": "m0", "address": "127.0.0.1:1", "port": 1,
                     "fs_root": str(root / "m-0"), "log": str(root / "m-0.log")}]}))
    out = cli("cluster", "start", "--root", str(root), "--watch", expect=(2,))
    last = out.stderr.strip().splitlines()[-1]
    assert "--watch applies to a new cluster only" in last, out.stderr
    assert not (root / "follower.log").exists() and not (root / "m-0").exists()


def test_master_block_when_the_follower_is_down() -> None:
    """The master's home page asks the follower with a deadline; a closed port or a
    server that is not a follower shows as unreachable, with why."""
    import trio

    from revivify.impl.web.master_views import follower_status

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    block = trio.run(follower_status, f"127.0.0.1:{port}")
    assert block["reachable"] is False and block["verdict"] is None and block["error"]
    assert block["link"] == f"http://127.0.0.1:{port}/follower"
