"""A warm parent for ``schedlab run --fork``: it imports TVM, torch and the lab once, never touches
the GPU itself, and forks one child per job. Each schedule still runs in its own process with a
time limit (a fault, an abort or a hang ends only that child), without paying ~3 s of imports per
schedule.

Protocol: one JSON job per line on stdin (with ``_timeout`` in seconds), one JSON row per line on
stdout. ``python -m reports.zygote [module:function]`` (default ``reports.worker:run_job_safe``).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import tempfile
import time


def _warm_imports():
    import numpy  # noqa: F401
    import tvm  # noqa: F401

    try:
        import torch  # noqa: F401  (imported, CUDA not initialised: safe to fork)
    except ImportError:
        pass
    import schedules  # noqa: F401
    import tuning.tuned  # noqa: F401
    from reports import baselines, build, measure, worker  # noqa: F401


def run_forked(handler, job: dict, timeout: float) -> dict:
    """Run ``handler(job)`` in a forked child; its row comes back through a pipe."""
    base = {"workload": job.get("workload"), "name": job.get("name")}
    log = tempfile.TemporaryFile()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: its own output goes to the log, the row to the pipe
        code = 0
        try:
            os.close(r)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            os.environ.update(job.get("env") or {})  # a job's own settings (e.g. SCHEDLAB_TUNED)
            data = json.dumps(handler(job), default=float).encode()
            while data:
                data = data[os.write(w, data):]
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks, deadline, timed_out = [], time.time() + timeout, False
    while True:
        left = deadline - time.time()
        if left <= 0:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return {**base, "status": "error", "error": f"timed out after {timeout:g} s (hang?)"}
    if chunks and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return json.loads(b"".join(chunks))
    log.seek(0)
    tail = [ln for ln in log.read().decode(errors="replace").splitlines() if ln.strip()]
    hint = next((ln for ln in reversed(tail) if "CUDA" in ln or "illegal" in ln.lower()), tail[-1] if tail else "")
    how = (f"killed by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
           else f"exit {os.WEXITSTATUS(status)}")
    return {**base, "status": "error", "error": f"process died ({how}): {hint.strip()[:300]}",
            "stderr": "\n".join(tail[-40:])}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    module, _, func = (argv[0] if argv else "reports.worker:run_job_safe").partition(":")
    handler = getattr(importlib.import_module(module), func)
    _warm_imports()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        row = run_forked(handler, job, float(job.pop("_timeout", 300)))
        print(json.dumps(row, default=float), flush=True)


if __name__ == "__main__":
    main()
