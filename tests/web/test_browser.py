"""The status pages in a real browser, over a real cluster (issue 30, "Every server shows
itself").

Three masters and four tablet servers as real processes (impl/processes MasterProcesses,
each with its pages on a free port), a table made with the CLI, and Debian's headless
Chromium driven by Selenium through chromedriver (``make test`` installs both from Debian's
packages: the Makefile's chromium stamp; nothing downloads a browser). The browser opens
every page of the leader master and of two tablet servers, follows the links master ->
table -> a replica's tablet page on its tablet server -> back to the master, and the
numbers it reads equal what the CLI's ``--json`` says for the same thing. No page logs a
SEVERE console message; a PNG of every page is saved under the test's tmp dir. Then a
tablet server is killed with SIGKILL: ``/tablet-servers`` shows it DEAD and ``/table`` its
tablets UNDER_REPLICATED, until the masters re-replicate them and ``/table`` says HEALTHY.

Every wait has a deadline (generous: the machine is shared); no timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from revivify.impl.processes.masters import MasterProcesses

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# Failure detection quick enough for the test, slow enough to see the tablets
# under-replicated first: dead after 1.5 s, re-replicated after 6 s.
MASTER_ARGS = ("--tserver-dead-after-ms", "1500", "--tserver-failed-after-ms", "6000")
T = TypeVar("T")

pytestmark = pytest.mark.skipif(
    not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
    reason="needs Debian's chromium and chromium-driver (make chromium)")


def cli_json(*argv: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv, "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, (argv, out.stdout, out.stderr)
    return json.loads(out.stdout)


def wait_for(what: str, seconds: float, probe: Callable[[], T | None]) -> T:
    deadline = time.monotonic() + seconds
    while True:
        found = probe()
        if found is not None and found is not False and found != "":
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {seconds:g}s")
        time.sleep(0.3)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1280,1024"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


class Visitor:
    """Opens pages, checks the console, keeps a screenshot of each."""

    def __init__(self, driver: webdriver.Chrome, shots: Path) -> None:
        self.driver = driver
        self.shots = shots
        self.taken: list[Path] = []
        shots.mkdir(parents=True, exist_ok=True)

    def open(self, url: str, name: str) -> None:
        self.driver.get(url)
        self.check(name)

    def check(self, name: str) -> None:
        severe = [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert not severe, (self.driver.current_url, severe)
        assert "Internal Server Error" not in self.driver.page_source
        path = self.shots / f"{len(self.taken):02d}-{name}.png"
        assert self.driver.save_screenshot(str(path))
        self.taken.append(path)

    def text(self, css: str) -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)


def leader_of(masters: str) -> str | None:
    """The ready leader master's address; None (wait_for waits on) until there is one."""
    rows = cli_json("master", "list", "--masters", masters)["masters"]
    ready = [m["address"] for m in rows if m.get("ready")]
    return ready[0] if ready else None


def test_pages_in_a_browser(tmp_path: Path, browser: webdriver.Chrome) -> None:
    with MasterProcesses(str(tmp_path / "c"), masters=3, tservers=4,
                         master_args=MASTER_ARGS) as cluster:
        cluster.start_all()
        masters = cluster.master_list
        leader = wait_for("a ready leader master", 60, lambda: leader_of(masters))
        m = next(x for x in cluster.masters if x.address == leader)
        visit = Visitor(browser, tmp_path / "screenshots")
        wait_for("4 live tablet servers", 60, lambda: len(
            [t for t in cli_json("tserver", "list", "--masters", masters)["tservers"]
             if t["live"]]) == 4)
        cli_json("table", "create", "t1", "--masters", masters, "--tablets", "2",
                 "--replicas", "3", "--deadline", "60")
        described = wait_for("t1's tablets led", 60, lambda: _led(masters))

        _master_pages(visit, m.web, m.uuid, masters, described)
        _follower_links_to_leader(visit, cluster, m.web)
        victim = _follow_links(visit, m.web, cluster, described)
        _tserver_pages(visit, cluster, described)
        _a_write_moves_the_wal_counters(cluster)
        _kill_and_heal(visit, m.web, cluster, victim, described)
        assert len(visit.taken) >= 15 and all(p.stat().st_size > 0 for p in visit.taken)


def _led(masters: str) -> dict[str, Any] | None:
    doc: dict[str, Any] = cli_json("table", "describe", "t1", "--masters", masters)
    ok = len(doc["tablets"]) == 2 and all(
        t["state"] == "RUNNING" and len(t["replicas"]) == 3
        and sum(r["role"] == "LEADER" for r in t["replicas"]) == 1 for t in doc["tablets"])
    return doc if ok else None


def _master_pages(visit: Visitor, web: str, uuid: str, masters: str,
                  described: dict[str, Any]) -> None:
    visit.open(f"http://{web}/", "master-home")
    assert visit.text("#uuid") == uuid and visit.text("#role") == "LEADER"
    status = cli_json("master", "status", "--master", visit.text("#address"))
    assert visit.text("#term") == str(status["term"]) and status["ready"] is True
    visit.open(f"http://{web}/masters", "masters")
    listed = cli_json("master", "list", "--masters", masters)["masters"]
    rows = visit.driver.find_elements(By.CSS_SELECTOR, "#masters tr")[1:]
    assert len(rows) == len(listed) == 3
    visit.open(f"http://{web}/tablet-servers", "tablet-servers")
    tservers = cli_json("tserver", "list", "--masters", masters)["tservers"]
    shown = {row.get_attribute("data-uuid"): row.find_element(By.CSS_SELECTOR, ".live").text
             for row in visit.driver.find_elements(By.CSS_SELECTOR, "#tservers tr[data-uuid]")}
    assert shown == {t["uuid"]: "LIVE" for t in tservers}
    visit.open(f"http://{web}/tables", "tables")
    assert visit.text("#tables td") == "t1"
    for name in ("operations", "logs", "ksck"):
        visit.open(f"http://{web}/{name}", name)
    assert visit.text("#summary").startswith("HEALTHY"), visit.text("#summary")
    visit.open(f"http://{web}/api/v1/ksck", "ksck-json")
    assert cli_json("ksck", "--masters", masters)["healthy"] is True
    assert described["tablets"]


def _follower_links_to_leader(visit: Visitor, cluster: MasterProcesses, leader_web: str
                              ) -> None:
    follower = next(x for x in cluster.masters if x.web != leader_web)
    visit.open(f"http://{follower.web}/", "follower-master-home")
    assert visit.text("#role") == "FOLLOWER"
    visit.driver.find_element(By.CSS_SELECTOR, "#leader a").click()
    visit.check("leader-from-follower")
    assert visit.driver.current_url == f"http://{leader_web}/"
    # A follower sends the catalog's pages to the leader's (307).
    visit.open(f"http://{follower.web}/tables?page=1", "tables-via-follower")
    assert visit.driver.current_url == f"http://{leader_web}/tables?page=1"
    assert visit.text("#tables td") == "t1"


def _follow_links(visit: Visitor, web: str, cluster: MasterProcesses,
                  described: dict[str, Any]) -> str:
    """master /tables -> /table -> the leader replica's tablet page on its server ->
    that server's master link -> a master's page. The victim for later: that server."""
    visit.open(f"http://{web}/tables", "tables-again")
    visit.driver.find_element(By.LINK_TEXT, "t1").click()
    visit.check("table")
    assert visit.text("#table-id") == described["table_id"]
    tablet = described["tablets"][0]
    lead = next(r for r in tablet["replicas"] if r["role"] == "LEADER")
    link = visit.driver.find_element(
        By.CSS_SELECTOR, f'tr[data-tablet="{tablet["tablet_id"]}"] '
                         f'.replica[data-uuid="{lead["uuid"]}"] a')
    link.click()
    visit.check("tablet-on-tserver")
    server = next(s for s in cluster.tservers.servers if s.uuid == lead["uuid"])
    assert visit.driver.current_url.startswith(f"http://{server.web}/tablet?id=")
    state = cli_json("tserver", "status", "--tserver", server.address)
    mine = next(r for r in state["replicas"] if r["tablet_id"] == tablet["tablet_id"])
    assert visit.text("#term") == str(mine["term"]) == str(tablet["term"])
    assert visit.text("#role") == mine["role"] == "LEADER"
    assert visit.text("#commit") == str(mine["commit_index"])
    assert len(visit.driver.find_elements(By.CSS_SELECTOR, "#progress tr")) == 1 + 3
    visit.driver.find_element(By.CSS_SELECTOR, "main ul li a").click()  # back to a master
    visit.check("back-to-master")
    assert visit.driver.current_url.rstrip("/") in {
        f"http://{m.web}" for m in cluster.masters}
    return str(lead["uuid"])


def _tserver_pages(visit: Visitor, cluster: MasterProcesses, described: dict[str, Any]
                   ) -> None:
    for s in cluster.tservers.servers[:2]:
        visit.open(f"http://{s.web}/", f"tserver-{s.index}-home")
        assert visit.text("#uuid") == s.uuid and visit.text("#address") == s.address
        for attempt in range(5):  # an election between the two reads moves the numbers
            state = cli_json("tserver", "status", "--tserver", s.address)
            visit.open(f"http://{s.web}/tablets", f"tserver-{s.index}-tablets-{attempt}")
            shown = {row.get_attribute("data-tablet"): (
                row.find_element(By.CSS_SELECTOR, ".term").text,
                row.find_element(By.CSS_SELECTOR, ".commit").text,
                row.find_element(By.CSS_SELECTOR, ".role").text)
                for row in visit.driver.find_elements(By.CSS_SELECTOR, "#tablets tr[data-tablet]")}
            said = {r["tablet_id"]: (str(r["term"]), str(r["commit_index"]), r["role"])
                    for r in state["replicas"]}
            if shown == said:
                break
        assert shown == said
        # Each row names its table, as the leader master told this server.
        cells = visit.driver.find_elements(By.CSS_SELECTOR, "#tablets td.table")
        assert cells and {c.text for c in cells} == {"t1"}
        for name in ("copies", "logs", "tablets?state=RUNNING"):
            visit.open(f"http://{s.web}/{name}", f"tserver-{s.index}-{name.split('?')[0]}")
    assert described["tablets"]


def scrape(web: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A server's /metrics through prometheus_client's own parser (which refuses anything
    that is not the exposition format): (sample, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://{web}/metrics", timeout=30) as page:
        text = page.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _a_write_moves_the_wal_counters(cluster: MasterProcesses) -> None:
    key = ("revivify_wal_appended_bytes_total", ())
    webs = [s.web for s in cluster.tservers.servers if s.running and s.web]
    before = sum(scrape(w).get(key, 0.0) for w in webs)
    cli_json("row", "put", "metrics-key", "v" * 100, "--masters", cluster.master_list,
             "--table", "t1")
    # Three replicas append the row (and its commit): every one of them counts its bytes.
    wait_for("the WAL counters to move", 30, lambda: sum(
        scrape(w).get(key, 0.0) for w in webs) >= before + 3 * 100 or None)


def _kill_and_heal(visit: Visitor, web: str, cluster: MasterProcesses, victim: str,
                   described: dict[str, Any]) -> None:
    index = next(s.index for s in cluster.tservers.servers if s.uuid == victim)
    cluster.tservers.kill(index)
    url = f"http://{web}/tablet-servers"

    def dead() -> bool:
        visit.driver.get(url)
        row = visit.driver.find_element(By.CSS_SELECTOR, f'tr[data-uuid="{victim}"] .live')
        return row.text == "DEAD"

    wait_for("the killed server DEAD on /tablet-servers", 60, dead)
    visit.check("tablet-servers-dead")
    table = f"http://{web}/table?id={described['table_id']}"

    def health() -> list[str]:
        visit.driver.get(table)
        return [c.text for c in visit.driver.find_elements(By.CSS_SELECTOR, "td.health")]

    wait_for("a tablet UNDER_REPLICATED on /table", 30,
             lambda: "UNDER_REPLICATED" in health())
    visit.check("table-under-replicated")
    # The leader master's /metrics says the same as its pages, as Prometheus would scrape it.
    under = ("revivify_master_tablets", (("health", "under_replicated"),))
    healthy = ("revivify_master_tablets", (("health", "healthy"),))
    wait_for("under_replicated >= 1 on the leader master's /metrics", 30,
             lambda: scrape(web).get(under, 0) >= 1 or None)
    wait_for("every tablet HEALTHY again on /table", 120,
             lambda: health() == ["HEALTHY", "HEALTHY"])
    visit.check("table-healed")
    def healed_metrics() -> bool | None:
        values = scrape(web)
        return (values.get(under) == 0 and values.get(healthy, 0) >= 2) or None

    wait_for("under_replicated back to 0 on the leader master's /metrics", 60, healed_metrics)
    healed = cli_json("table", "describe", "t1", "--masters", cluster.master_list)
    assert all(victim not in {r["uuid"] for r in t["replicas"]} for t in healed["tablets"])
