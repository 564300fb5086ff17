"""The finding pages of ``trace check --html`` and ``history check --html`` (issue 33) in a
real headless Chromium (Debian's, driven by Selenium through chromedriver, as in
tests/web/test_browser.py; nothing is downloaded).

The CLI runs as a real process on a bad corpus case and writes the page; the browser opens
it over file://, a PNG of it is saved under the test's tmp dir and decoded here: it is not
one colour, and the offending event's red fill is in it. Through the DOM: the marked event
and one lane per server incarnation are displayed. A trace with markup in it: the page
shows the markup as text, runs nothing, has no script element.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "traces" / "bad" / "vote-before-request"
ETCD_BAD = ROOT / "tests" / "data" / "histories" / "jepsen-etcd" / "etcd_000.log"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
OFFENDING_FILL = (0xFD, 0xE2, 0xE0)  # checker/htmlpage.py: .offending .box

pytestmark = pytest.mark.skipif(
    not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)),
    reason="needs Debian's chromium and chromium-driver (make chromium)")


@pytest.fixture
def chromium() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1400,1000", "--force-color-profile=srgb"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def revivify(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "revivify.impl.cli.main", *argv],
                          capture_output=True, text=True, timeout=120, check=False)


def pixels(png: bytes, every: int = 3) -> set[tuple[int, ...]]:
    """The colours of every ``every``-th row of an 8-bit RGB(A), non-interlaced PNG (what
    Chromium's screenshots are), decoded with zlib: PNG's five row filters undone."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, head = 8, b"", b""
    while pos < len(png):
        size, kind = struct.unpack(">I4s", png[pos:pos + 8])
        body = png[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            head = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + size
    width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", head)
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 3 if ctype == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(idat)
    prev = bytearray(stride)
    seen: set[tuple[int, ...]] = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                row[i] = (row[i] + a) & 0xFF
            elif f == 2:
                row[i] = (row[i] + b) & 0xFF
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                row[i] = (row[i] + pred) & 0xFF
        if y % every == 0:
            seen.update(tuple(row[i:i + 3]) for i in range(0, stride, bpp))
        prev = row
    return seen


def near(colour: tuple[int, ...], seen: set[tuple[int, ...]]) -> bool:
    return any(all(abs(x - y) <= 3 for x, y in zip(colour, s, strict=True)) for s in seen)


def test_trace_report_in_chromium(tmp_path: Path, chromium: webdriver.Chrome) -> None:
    page = tmp_path / "report.html"
    done = revivify("trace", "check", "--quiet", "--html", str(page), str(CASE))
    assert done.returncode == 1, done.stderr
    chromium.get(page.as_uri())
    marked = chromium.find_element(By.ID, "offending-1")
    assert marked.is_displayed()
    at = json.loads((CASE / "expected.json").read_text())["at"]
    assert (marked.get_attribute("data-file"), marked.get_attribute("data-line")) == (
        at["file"], str(at["line"]))
    lanes = chromium.find_elements(By.CSS_SELECTOR, "#finding-1 ~ div svg g.lane")
    assert len(lanes) == len(list(CASE.glob("*.jsonl"))) == 3
    assert all(lane.is_displayed() for lane in lanes)
    assert chromium.find_element(By.ID, "callout-1").is_displayed()
    shot = tmp_path / "report.png"
    assert chromium.save_screenshot(str(shot))
    seen = pixels(shot.read_bytes())
    assert len(seen) > 10, "the screenshot is (nearly) one colour"
    assert near(OFFENDING_FILL, seen), "the offending event's fill is not on the screen"
    severe = [e for e in chromium.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


def test_markup_in_a_trace_does_not_run(tmp_path: Path, chromium: webdriver.Chrome) -> None:
    case = tmp_path / "hostile"
    shutil.copytree(CASE, case)
    evil = '<script>document.title="pwned"</script><b id="injected">bold</b>'
    for f in case.glob("*.jsonl"):
        out = []
        for text in f.read_text().splitlines():
            ev = json.loads(text)
            if ev["tablet"] is not None:
                ev["tablet"] = "t" + evil
            out.append(json.dumps(ev, separators=(",", ":")))
        f.write_text("\n".join(out) + "\n")
    page = tmp_path / "report.html"
    done = revivify("trace", "check", "--quiet", "--html", str(page), str(case))
    assert done.returncode == 1, done.stderr
    chromium.get(page.as_uri())
    assert chromium.title != "pwned"
    assert chromium.find_elements(By.TAG_NAME, "script") == []
    assert chromium.find_elements(By.ID, "injected") == []
    assert evil in chromium.find_element(By.TAG_NAME, "body").text
    assert chromium.find_element(By.ID, "offending-1").is_displayed()
    assert chromium.save_screenshot(str(tmp_path / "hostile.png"))


def test_history_report_in_chromium(tmp_path: Path, chromium: webdriver.Chrome) -> None:
    page = tmp_path / "history.html"
    done = revivify("history", "check", str(ETCD_BAD), "--model", "register", "--format",
                    "jepsen", "--quiet", "--html", str(page))
    assert done.returncode == 1, done.stderr
    chromium.get(page.as_uri())
    assert chromium.find_element(By.ID, "window-1").is_displayed()
    window_ops = chromium.find_elements(By.CSS_SELECTOR, "g.op.window-op")
    assert window_ops and all(op.is_displayed() for op in window_ops)
    assert len(chromium.find_elements(By.CSS_SELECTOR, "g.lane")) >= 2
    shot = tmp_path / "history.png"
    assert chromium.save_screenshot(str(shot))
    assert len(pixels(shot.read_bytes())) > 10
