"""The tuning database directory: MetaSchedule's JSONDatabase plus the lab's own trial log, both
append-only JSON-lines files that survive a SIGKILL at any moment.

Layout of ``DIR``:
- ``database_workload.json``, ``database_tuning_record.json``: MetaSchedule's JSONDatabase
  (``compile_tir``/``query_schedule`` read it; a record is a trace + its run times).
- ``trials.jsonl``: one line per trial of every run: run name, knob values, status (ok, build,
  run, wrong, invalid), failure reason, time, throughput, and the full trace of good candidates.
- ``best_<workload>.json``: the best verified configuration of a workload (what ``tuned_gemm``
  replays).

Crash safety: every append is one ``write`` of a complete line, so a process killed while
appending leaves at most one partial last line; rewrites are atomic (a temporary file, fsync,
rename). Before a run, :mod:`tuning.database` checks every line of the three files and recovers a
damaged one (kept aside, never overwritten).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile

from schedules.names import slug

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
TRIALS_FILE = "trials.jsonl"


class DirectoryInUse(ValueError):
    """Another ``schedlab tune`` holds this tuning directory."""


class DirectoryLock:
    """An exclusive lock on a tuning directory for the whole run (``DIR/.lock``, flock): two tuners
    appending to one trial log and one database would interleave their trials and resume each
    other's runs. The lock goes with the process, however it ends."""

    def __init__(self, db_dir: str):
        self.path = os.path.join(db_dir, ".lock")
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self.fd, 64, 0).decode(errors="replace").strip() or "another process"
            os.close(self.fd)
            self.fd = None
            raise DirectoryInUse(f"{os.path.dirname(self.path)} is being tuned by {holder}: wait for it, or "
                                 "use another --db") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"schedlab tune (pid {os.getpid()})".encode(), 0)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def plain(obj):
    """TVM containers/immediates → plain JSON values."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if hasattr(obj, "value") and type(obj).__name__ in ("IntImm", "FloatImm", "StringImm"):
        return obj.value
    if isinstance(obj, dict) or type(obj).__name__ == "Map":
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) or type(obj).__name__ in ("Array", "List"):
        return [plain(x) for x in obj]
    if type(obj).__name__ == "String":
        return str(obj)
    try:
        return int(obj)
    except (TypeError, ValueError):
        return str(obj)


def atomic_write(path: str, data: bytes):
    """Write ``data`` to ``path`` whole or not at all: a temporary file in the same directory,
    synced, given an ordinary file's mode, then renamed over ``path``. Raises OSError, leaving any
    previous file untouched and no temporary file behind."""
    tmp = None
    try:
        directory, name = os.path.split(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".tmp-{name}-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary file would be (mkstemp makes it private)
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass


def append_jsonl(path: str, value: dict):
    """Append one line with a single write (O_APPEND); a kill leaves at most a partial last line."""
    line = (json.dumps(value, default=plain, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_jsonl(path: str) -> list[dict]:
    """The JSON objects of a JSON-lines file; other lines (damaged, or of another shape) are skipped
    (a run checks and recovers the file first: tuning.database)."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out


def trace_key(workload: str, space: str, trace_json) -> str:
    """Identity of a candidate: the workload, the space and its trace before postprocessing."""
    text = json.dumps([workload, space, plain(trace_json)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def workload_slug(workload: str) -> str:
    return slug(workload)


def best_path(db_dir: str, workload: str) -> str:
    return os.path.join(db_dir, f"best_{workload_slug(workload)}.json")


def save_json(path: str, value: dict):
    atomic_write(path, (json.dumps(value, indent=1, default=plain) + "\n").encode())


def trials(db_dir: str, workload: str | None = None, run: str | None = None) -> list[dict]:
    rows = read_jsonl(os.path.join(db_dir, TRIALS_FILE))
    return [r for r in rows if (workload is None or r.get("workload") == workload)
            and (run is None or r.get("run") == run)]
