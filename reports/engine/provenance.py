"""Where a figure came from: GPU, TVM version, git commit, date."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from importlib import metadata

import tvm

from schedules import calibration
from schedules.names import slug as _slug


def git_commit(path: str | None = None) -> str:
    """SCHEDLAB_COMMIT where set (a copy of the tree, e.g. on the GPU machine, whose .git, if any, is
    not the one it came from), else the checkout's HEAD (+dirty); for an installed package (no
    checkout around it: whatever repository the environment sits in is not the lab's), its version."""
    if os.environ.get("SCHEDLAB_COMMIT"):
        return os.environ["SCHEDLAB_COMMIT"]
    path = path or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    installed = installed_version(path)
    if installed:
        return f"tvm-schedlab {installed} (installed)"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=path, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=path,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("SCHEDLAB_COMMIT", "unknown")
    if not commit:
        return os.environ.get("SCHEDLAB_COMMIT", "unknown")
    return commit + ("+dirty" if dirty else "")


def installed_version(path: str) -> str | None:
    """The version of the tvm-schedlab installed at ``path`` (a site-packages directory) from a
    wheel; None for a checkout (an editable install lives elsewhere)."""
    try:
        dist = metadata.distribution("tvm-schedlab")
    except metadata.PackageNotFoundError:
        return None
    return dist.version if os.path.realpath(str(dist.locate_file(""))) == os.path.realpath(path) else None


def gpu_name() -> str | None:
    try:
        dev = tvm.cuda(0)
        return dev.device_name if dev.exist else None
    except Exception:  # noqa: BLE001
        return None


def slug(name: str) -> str:
    """A GPU's or a workload's name as a file or directory name (``reports/results/<gpu>``,
    ``tuning_<workload>.md``); ``unknown`` where nothing is left."""
    return _slug(name, keep="._-") or "unknown"


def provenance() -> dict:
    """GPU, TVM, commit, date, host, Python; and, where the dispatcher's constants are not the
    packaged ones (``SCHEDLAB_CALIBRATION``), the calibration file and its source."""
    p = {"gpu": gpu_name() or "no GPU", "tvm": tvm.__version__, "commit": git_commit(),
         "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "host": platform.node(), "python": platform.python_version()}
    if os.environ.get(calibration.ENV):
        p["calibration"] = f"{os.environ[calibration.ENV]}: {calibration.CALIBRATION.get('source', 'no source given')}"
    return p
