"""The demo run's report.html in headless Chromium (DevTools protocol over a pipe): no console error, no
request but the file itself, the banner and the culprit visible; a full-page screenshot is kept in
test-artifacts/report.png. The static checks (no http(s) URL, no script) need no browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .cdp import Browser, find_chromium
from .conftest import ARTIFACTS, SIGNER, DemoRun

CHROMIUM = find_chromium()

BOX = """(() => {
  const e = document.querySelector(%r);
  if (!e) return null;
  const r = e.getBoundingClientRect(), st = getComputedStyle(e);
  return {text: e.innerText, top: r.top + window.scrollY, width: r.width, height: r.height,
          shown: r.width > 0 && r.height > 0 && st.visibility !== 'hidden' && st.display !== 'none'};
})()"""


def test_report_is_self_contained(demo_run: DemoRun) -> None:
    html = (demo_run.run / "report.html").read_text()
    assert not re.search(r"(?i)https?://", html), "the report must reference no http(s) URL at all"
    assert not re.search(r"(?i)<script|<iframe|<object|<embed|<img|<link\b|@import|url\(", html)
    hrefs = set(re.findall(r'href="([^"]*)"', html))
    outside = {h for h in hrefs if not (h.startswith(("#", "raw/")) or h in ("results.json", "junit.xml"))}
    assert not outside, outside
    assert len(html) < 2_000_000


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (tools/bootstrap installs it as root; Debian: apt install chromium)",
)
def test_report_in_headless_chromium(demo_run: DemoRun, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    page = (demo_run.run / "report.html").resolve()
    browser = Browser(CHROMIUM, tmp_path / "profile")
    try:
        browser.open_page(page.as_uri())
        banner = browser.evaluate(BOX % "#banner")
        simulated = browser.evaluate(BOX % "#simulated")
        culprit = browser.evaluate(BOX % ".card .title")
        signoff = browser.evaluate(BOX % ".signoff")
        ARTIFACTS.mkdir(exist_ok=True)
        browser.screenshot(ARTIFACTS / "report.png")
        browser.screenshot(ARTIFACTS / "report-top.png", height=900)
    finally:
        log = browser.close()
    assert browser.console_errors() == [], browser.console_errors()
    assert "Uncaught" not in log
    assert set(browser.requests()) == {page.as_uri()}, browser.requests()  # nothing else was fetched
    assert banner and banner["shown"] and banner["top"] < 10 and banner["text"].startswith("REJECT")
    assert simulated and simulated["shown"] and "SIMULATED HARDWARE" in simulated["text"]
    assert culprit and culprit["shown"] and culprit["text"] == "node3 rail 5"
    assert culprit["top"] < 900, "the culprit is the first thing after the banner"
    assert signoff and SIGNER[0] in signoff["text"] and SIGNER[1] in signoff["text"]
    assert (ARTIFACTS / "report.png").stat().st_size > 50_000
