"""How long a report.html takes to open in headless Chromium: until its load event, and until its main
content is rendered.

The browser is driven through the unit tests' DevTools client (tests/unit/report/cdp.py, imported by path),
a fresh browser and profile per repeat. Both times are read from the page's own clock (milliseconds since
its navigation started, the clock of the Navigation Timing API), so they compare with each other:

- load: ``PerformanceNavigationTiming.loadEventStart``, when the load event fired;
- rendered: the first frame in which the report's ``main > footer`` (templates/report.html.j2: the last
  element of <main>, after the sign-off, so every section above it is parsed) has a layout box, taken
  after that frame's paint (a timeout queued from its requestAnimationFrame callback runs after the
  frame's rendering steps). A script added with Page.addScriptToEvaluateOnNewDocument watches for it
  from the first frame on, so a report painted before its load event is timed as such.

Also printed per open: DOMContentLoaded, and Paint Timing's first-contentful-paint ("first paint"), which
is a presentation time (the frame on screen, after the compositor); headless with --disable-gpu presents
some 30 ms after the main thread painted, so it can come later than "rendered" on a small report.

Printed: the file's size, each repeat, and one last line with the medians:
``html_open: MB=… load_s=… rendered_s=…`` (MB = 10^6 bytes).

Run:  .venv/bin/python benchmarks/html_open.py reports/demo/latest/report.html [--repeats 3]
Needs chromium on PATH (tools/bootstrap installs Debian's as root).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SELECTOR = "main > footer"


def _cdp() -> ModuleType:
    """tests/unit/report/cdp.py, loaded by path (tests/ is no package on sys.path)."""
    path = ROOT / "tests" / "unit" / "report" / "cdp.py"
    spec = importlib.util.spec_from_file_location("clusteraccept_bench_cdp", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Runs in every new document before the report's own content; stores the page time of the first painted
# frame that has the selector's element laid out.
WATCH = """(() => {
  const tick = () => {
    const e = document.querySelector(%s);
    if (e && e.getBoundingClientRect().height > 0) {
      setTimeout(() => { window.__htmlOpenRendered_ms = performance.now(); }, 0);
    } else {
      requestAnimationFrame(tick);
    }
  };
  requestAnimationFrame(tick);
})();"""

# Evaluated after the load event: waits for the watcher and for the first-contentful-paint entry (Paint
# Timing reports it at presentation, after the compositor: up to 5 s more), then reads the page's timeline.
TIMES = """new Promise((resolve) => {
  const start = performance.now();
  const poll = () => {
    const fcp = performance.getEntriesByName('first-contentful-paint')[0];
    if (window.__htmlOpenRendered_ms === undefined || (!fcp && performance.now() - start < 5000)) {
      setTimeout(poll, 5);
      return;
    }
    const nav = performance.getEntriesByType('navigation')[0];
    resolve({rendered_ms: window.__htmlOpenRendered_ms, load_ms: nav.loadEventStart,
             dcl_ms: nav.domContentLoadedEventStart, fcp_ms: fcp ? fcp.startTime : null,
             height_px: document.documentElement.scrollHeight});
  };
  poll();
})"""


def open_once(cdp: ModuleType, binary: str, page: Path, timeout_s: float) -> dict[str, Any]:
    """One cold open in a fresh browser: the page's timeline, plus the wall time the load event took."""
    with tempfile.TemporaryDirectory(prefix="html-open-") as tmp:
        browser = cdp.Browser(binary, Path(tmp) / "profile")
        try:
            browser.attach_page()
            browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH % json.dumps(SELECTOR)})
            t0 = time.monotonic()
            browser.open_page(page.as_uri(), timeout_s=timeout_s)
            wall_load_s = time.monotonic() - t0
            try:
                times: dict[str, Any] = browser.evaluate(TIMES, await_promise=True, timeout_s=timeout_s)
            except TimeoutError:
                sys.exit(f"html_open: no {SELECTOR!r} rendered within {timeout_s:g} s (not a report.html?)")
            errors = browser.console_errors()
        finally:
            browser.close()
    if errors:
        print(f"  console errors: {errors[:5]}", file=sys.stderr)
    return {**times, "wall_load_s": wall_load_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("report", type=Path, help="a report.html")
    ap.add_argument("--repeats", type=int, default=3, help="cold opens, each in a fresh browser (default 3)")
    ap.add_argument("--timeout-s", type=float, default=300, help="per open, for the load and the render")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    page: Path = args.report.resolve()
    if not page.is_file():
        sys.exit(f"html_open: no such file: {page}")
    cdp = _cdp()
    binary = cdp.find_chromium()
    if binary is None:
        sys.exit(
            "html_open: chromium is not installed (Debian: apt-get install chromium; tools/bootstrap as root)"
        )
    size_B = page.stat().st_size
    print(f"{page}: {size_B / 1e6:.2f} MB ({size_B} bytes); {binary}")
    runs = []
    for i in range(args.repeats):
        t = open_once(cdp, binary, page, args.timeout_s)
        fcp = "?" if t["fcp_ms"] is None else f"{t['fcp_ms'] / 1e3:.3f}"
        print(
            f"  open {i + 1}: first paint {fcp} s, DOMContentLoaded {t['dcl_ms'] / 1e3:.3f} s, "
            f"load {t['load_ms'] / 1e3:.3f} s, {SELECTOR!r} rendered {t['rendered_ms'] / 1e3:.3f} s "
            f"(page time); load event {t['wall_load_s']:.3f} s after Page.navigate (wall); "
            f"page {t['height_px']} px tall"
        )
        runs.append(t)
    load_s = statistics.median(t["load_ms"] for t in runs) / 1e3
    rendered_s = statistics.median(t["rendered_ms"] for t in runs) / 1e3
    print(f"html_open: MB={size_B / 1e6:.2f} load_s={load_s:.3f} rendered_s={rendered_s:.3f}")


if __name__ == "__main__":
    main()
