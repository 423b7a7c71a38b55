"""Jobs in worker processes the parent can kill: a build that crashes the compiler, a kernel that
faults (a CUDA illegal address aborts the whole process) or one that hangs becomes that job's error
row, and the other jobs go on.

A worker is a long-lived ``python -m reports.engine.isolate MODULE:FUNCTION CWD`` process: it imports
TVM and the lab once, started in the lab's own directory (first on its module path, so that nothing
in the caller's directory shadows the lab's modules) and working in the caller's directory ``CWD`` (so
relative paths, ``--out out/run`` or ``SCHEDLAB_TUNED=out/tune``, mean what they mean to the caller,
and nothing lands inside an installed package), then reads one JSON job per line on stdin, calls ``FUNCTION(job)`` and
writes one JSON row per line on a private copy of its stdout (whatever the job prints goes to its
stderr file). The parent (:class:`Pool`) gives every job a deadline; a worker that dies or runs past
it is killed (its whole process group) and replaced for the next job, and the row says what
happened, with the last lines the job wrote to stderr. Workers are reused, so a job costs no
interpreter start-up.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
START_TIMEOUT = 180.0  # seconds a worker may take to import what it needs


def error_line(e) -> str:
    """The line of an exception that says what went wrong (ptxas and TVM put 'error' in it; the
    last line is often only ptxas's timing note)."""
    msg = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    line = next((ln for ln in msg if "error" in ln.lower()), msg[-1] if msg else "")
    return f"{type(e).__name__}: {line[:300]}"


def _lab_errors():
    """The lab's error types: bad input, and a baseline that cannot run here. Imported by the worker
    once it is in the caller's directory (importing the lab reads SCHEDLAB_CALIBRATION), before it
    says it is ready, so that no job's time limit pays for the import."""
    from schedules import ScheduleParamError

    from .baselines import Unavailable

    return ScheduleParamError, Unavailable


def failure_row(e) -> dict:
    """A job's row for an exception raised inside it: bad input keeps its one-line message."""
    bad_input, unavailable = _lab_errors()
    if isinstance(e, unavailable):
        return {"status": "unavailable", "error": str(e)}
    return {"status": "error", "error": str(e) if isinstance(e, bad_input) else error_line(e),
            "traceback": traceback.format_exc()[-4000:]}


def _json_default(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


class _Worker:
    def __init__(self, handler: str, env: dict):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "reports.engine.isolate", handler, os.getcwd()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=ROOT, env=env, start_new_session=True)
        self.job = self.deadline = None
        self.log_from = 0
        self.ready = False

    def wait_ready(self, timeout: float):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith('{"ready"'):
            tail = self.stderr_tail(0)
            self.kill()
            raise RuntimeError(f"a worker process did not start: {tail or 'no output'}")
        self.ready = True

    def send(self, job: dict, timeout: float):
        self.job, self.deadline = job, time.time() + timeout
        self.log.seek(0, os.SEEK_END)
        self.log_from = self.log.tell()
        self.proc.stdin.write(json.dumps(job, default=_json_default) + "\n")
        self.proc.stdin.flush()

    def stderr_tail(self, start: int, lines: int = 40) -> str:
        self.log.seek(start)
        text = self.log.read().decode(errors="replace")
        return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class Pool:
    """``workers`` worker processes running ``handler`` (``"module:function"``) on jobs, each job
    within ``timeout`` seconds. ``env``: extra environment variables for the workers. ``until``: a
    moment (time.time()) by which every job is over: a job running then is killed, and the jobs not
    started get a ``skipped`` row (a command's time limit)."""

    def __init__(self, handler: str, workers: int = 1, timeout: float = 300.0, env: dict | None = None,
                 until: float | None = None):
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.handler, self.size, self.timeout, self.until = handler, max(1, int(workers)), timeout, until
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = ROOT + (os.pathsep + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
        self.env.update(env or {})
        self.workers: list[_Worker] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for w in self.workers:
            w.kill()
        self.workers = []

    def _left(self) -> float:
        return float("inf") if self.until is None else self.until - time.time()

    def _start(self, n: int):
        started: list[_Worker] = []
        try:
            for _ in range(n):
                started.append(_Worker(self.handler, self.env))
            for w in started:
                w.wait_ready(max(0.0, min(START_TIMEOUT, self._left())))
        except BaseException:  # a worker that did not start, or an interrupt meanwhile: none is left running
            for w in started:
                w.kill()
            raise
        self.workers += started

    def map(self, jobs: list[dict], on_row=None) -> list[dict]:
        """Rows for ``jobs``, in their order. ``on_row(index, row)`` is called as each one finishes.
        A row always carries its job's ``workload`` and ``name`` (and ``id`` if the job has one)."""
        jobs = list(jobs)
        rows: list[dict | None] = [None] * len(jobs)
        pending = list(range(len(jobs)))[::-1]
        busy: dict[_Worker, int] = {}
        want = min(self.size, len(jobs))

        def finish(index, row):
            job = jobs[index]
            base = {k: job[k] for k in ("id", "workload", "name") if k in job}
            rows[index] = {**base, **row}
            if on_row is not None:
                on_row(index, rows[index])

        def out_of_time(indices):
            for index in indices:
                finish(index, {"status": "skipped", "error": "not run: the command's time limit"})
            return rows

        if jobs and self._left() <= 0:
            return out_of_time(range(len(jobs)))
        if len(self.workers) < want:
            try:
                self._start(want - len(self.workers))
            except RuntimeError:
                if self._left() > 0:
                    raise
                return out_of_time(range(len(jobs)))  # the workers were still starting at the time limit

        try:
            while pending or busy:
                if pending and self._left() <= 0:  # the time limit: nothing more starts
                    out_of_time(pending[::-1])
                    pending = []
                    continue
                if pending and len(self.workers) < want:  # replace the workers that died or were killed
                    self._start(want - len(self.workers))
                for w in list(self.workers):
                    if pending and w not in busy:
                        if w.proc.poll() is not None:  # died after its last job: replace it
                            self.workers.remove(w)
                            w.kill()
                            self._start(1)
                            continue
                        index = pending.pop()
                        w.send(jobs[index], min(self.timeout, max(self._left(), 0.0)))
                        busy[w] = index
                if not busy:
                    continue
                now = time.time()
                wait = max(0.0, min(w.deadline for w in busy) - now)
                ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], wait)
                for w in list(busy):
                    index = busy[w]
                    if w.proc.stdout in ready:
                        line = w.proc.stdout.readline()
                        if line:
                            try:
                                row = json.loads(line)
                            except ValueError:
                                row = {"status": "error", "error": f"unreadable result: {line.strip()[:200]}"}
                            del busy[w]
                            finish(index, row)
                            continue
                        # EOF: the process died inside this job
                        time.sleep(0.05)
                        w.proc.wait()
                        code = w.proc.returncode
                        how = (f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}")
                        tail = w.stderr_tail(w.log_from)
                        lines = tail.splitlines()
                        hint = next((ln for ln in reversed(lines) if "CUDA" in ln or "illegal" in ln.lower()),
                                    lines[-1] if lines else "")
                        del busy[w]
                        self._replace(w)
                        finish(index, {"status": "error", "error": f"process died ({how}): {hint.strip()[:300]}",
                                       "stderr": tail})
                    elif time.time() >= w.deadline:
                        del busy[w]
                        self._replace(w)
                        if self._left() <= 0:
                            finish(index, {"status": "skipped", "error": "cut short by the command's time limit"})
                        else:
                            finish(index, {"status": "error", "error": f"timed out after {self.timeout:g} s (hang?)"})
        finally:
            if busy:  # interrupted: nothing half-finished is left running
                self.close()
        return rows

    def _replace(self, w: _Worker):
        w.kill()
        self.workers.remove(w)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    module, _, func = argv[0].partition(":")
    proto = os.fdopen(os.dup(1), "w")  # the rows; anything the jobs print goes to stderr
    os.dup2(2, 1)
    if len(argv) > 1:  # the caller's directory, before the lab is imported: relative paths (the jobs',
        os.chdir(argv[1])  # SCHEDLAB_CALIBRATION) are the caller's; the modules still come from the lab's directory
    _lab_errors()
    handler = getattr(importlib.import_module(module), func)
    proto.write(json.dumps({"ready": True}) + "\n")
    proto.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            row = handler(job)
        except Exception as e:  # noqa: BLE001 - a job's failure is its row
            row = failure_row(e)
        proto.write(json.dumps(row, default=_json_default) + "\n")
        proto.flush()


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it kills us
    main()
