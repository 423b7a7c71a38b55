"""Screenshot of a schedlab HTML report page in headless Chromium (Debian's /usr/bin/chromium,
driven by Playwright): opens the first schedule so the picture shows the tables and an IR panel.

    python screenshot.py PAGE.html OUT.png [--chromium PATH] [--max-height PX]

The PNG is 1280 px wide and kept under 400 kB (the shot is cut shorter until it is).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
WIDTH = 1280
MAX_BYTES = 400_000


def screenshot(page_path: str, out: str, chromium: str = "/usr/bin/chromium", max_height: int = 2200) -> str:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        # Playwright gives the launch a fresh temporary --user-data-dir
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": WIDTH, "height": 900}, device_scale_factor=1)
            page.goto("file://" + os.path.abspath(page_path), wait_until="load")
            first = page.locator("details.sched").first
            if first.count():
                first.locator("summary").click()
                expect(first).to_have_attribute("data-rendered", re.compile("."), timeout=30_000)
            page.evaluate("window.scrollTo(0, 0)")
            full = page.evaluate("document.documentElement.scrollHeight")
            height = min(full, max_height)
            while True:
                # a viewport as tall as the shot: IR chunks off screen are not painted (content-visibility)
                page.set_viewport_size({"width": WIDTH, "height": height})
                page.wait_for_timeout(150)
                png = page.screenshot(type="png")
                if len(png) <= MAX_BYTES or height <= 400:
                    break
                height = int(height * 0.8)
        finally:
            browser.close()
    d = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".png", dir=d)
    with os.fdopen(fd, "wb") as f:
        f.write(png)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", help="the report page (.html)")
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("--chromium", default=os.environ.get("SCHEDLAB_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--max-height", type=int, default=2200, help="tallest shot in px (default 2200)")
    a = ap.parse_args(argv)
    if not os.access(a.chromium, os.X_OK):
        print(f"screenshot: no Chromium at {a.chromium} (run install_browser.sh)", file=sys.stderr)
        return 2
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("screenshot: the playwright package is not installed (run install_browser.sh)", file=sys.stderr)
        return 2
    out = screenshot(a.page, a.out, a.chromium, a.max_height)
    print(f"{out}: {os.path.getsize(out) / 1e3:.0f} kB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
