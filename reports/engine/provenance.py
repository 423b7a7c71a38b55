"""Where a figure came from: GPU, TVM version, git commit, date."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess

import tvm

from schedules.names import slug as _slug


def git_commit(path: str | None = None) -> str:
    """SCHEDLAB_COMMIT where set (a copy of the tree, e.g. on the GPU machine, whose .git, if any, is
    not the one it came from), else the checkout's HEAD (+dirty)."""
    if os.environ.get("SCHEDLAB_COMMIT"):
        return os.environ["SCHEDLAB_COMMIT"]
    path = path or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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
    return {"gpu": gpu_name() or "no GPU", "tvm": tvm.__version__, "commit": git_commit(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "host": platform.node(), "python": platform.python_version()}
