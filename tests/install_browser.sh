#!/usr/bin/env bash
# Makes the HTML report's browser test (test_report_browser.py) and screenshot.py run rather than
# skip, on a Debian machine as root (CI): Debian's Chromium from apt, and Playwright for Python
# from PyPI as the driver. Playwright is pointed at /usr/bin/chromium, so no browser is ever
# downloaded: never run `playwright install` (that fetches a browser build from outside the
# registries, which fails here). `pip install playwright` itself only brings Playwright's driver,
# which ships inside the wheel.
#
# Idempotent and quiet: it installs only what is missing, prints nothing when all goes well, and
# always exits 0 (a failed install is shown on stderr; the browser tests then skip).
#   PYTHON=/path/to/venv/bin/python bash install_browser.sh   # which interpreter gets playwright
#
# When apt-get is not available (not Debian) or we are not root, Chromium is not installed: the
# script says so on stderr and still exits 0, and the browser tests then SKIP with a reason (set
# SCHEDLAB_REQUIRE_BROWSER=1 to make them fail instead). A Chromium elsewhere can be named with
# SCHEDLAB_CHROMIUM=/path/to/chromium.
# (chromium-driver, for Selenium, is not needed: the tests use Playwright.)
set -uo pipefail

PY=${PYTHON:-python3}
CHROMIUM=${SCHEDLAB_CHROMIUM:-/usr/bin/chromium}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

quietly() {  # run "$@" silently; on failure show its output and warn (the tests will then skip)
    if ! "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "install_browser.sh: '$*' failed; the browser tests will skip" >&2
        return 1
    fi
}

if [ ! -x "$CHROMIUM" ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        # no recommends: they pull in a desktop's worth of packages; one font family is enough
        quietly apt-get update -qq &&
            quietly apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
    else
        echo "install_browser.sh: no apt-get, or not root: Chromium not installed;" \
             "the browser tests will skip" >&2
    fi
fi

if ! "$PY" -c "import playwright.sync_api" >/dev/null 2>&1; then
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 quietly "$PY" -m pip install -q --disable-pip-version-check playwright
fi
exit 0
