"""``schedlab run``: every schedule and baseline on every workload, each in its own process with a
time limit; then the results files, the table and the charts."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile

import tuning.tuned  # noqa: F401  (registers tuned_gemm)
from schedules import all_schedules, get, parse_workload

from . import charts, tables
from .baselines import BASELINES, GPU_BASELINES
from .build import cuda_available, device_arch
from .progress import Progress
from .provenance import provenance

DEFAULT_WORKLOADS = ("gemm:1024x512x2048", "gemv:16384x16", "gemv:16384x32", "gemv:16384x128")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_isolated(job: dict, timeout: float, module: str = "reports.worker") -> dict:
    """Run one job in a fresh Python process (``python -m module``, JSON in on stdin, one JSON row
    out). A crash, a fault, a hang or a wrong answer becomes this job's error row. ``job["env"]``:
    environment variables for that process only."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(job.get("env") or {})  # a job's own settings (e.g. SCHEDLAB_TUNED)
    base = {"workload": job["workload"], "name": job["name"]}
    try:
        proc = subprocess.run([sys.executable, "-m", module], input=json.dumps(job), env=env,
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**base, "status": "error", "error": f"timed out after {timeout:g} s (hang?)"}
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    tail = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
    hint = next((ln for ln in reversed(tail) if "CUDA" in ln or "illegal" in ln.lower()), tail[-1] if tail else "")
    return {**base, "status": "error",
            "error": f"process died (exit {proc.returncode}): {hint.strip()[:300]}",
            "stderr": "\n".join(tail[-40:])}


class Zygote:
    """``schedlab run --fork``: jobs go to one warm parent (reports.zygote) that forks a child per
    job, so each schedule still runs in its own process with a time limit but without re-importing
    TVM and torch. If the parent itself dies it is restarted for the next job."""

    def __init__(self, handler: str | None = None):
        self.handler, self.proc, self.log = handler, None, None

    def _start(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # torch.cuda.is_available() (called by tvm_ffi when TVM is imported) would otherwise ask the CUDA
        # runtime, which marks every later fork "bad" (seen on the H200: "Cannot re-initialize CUDA in
        # forked subprocess"); through NVML it touches no CUDA state
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "reports.zygote"] + ([self.handler] if self.handler else []),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=ROOT, env=env)
        if not self.proc.stdout.readline():
            self.close()
            raise RuntimeError("the fork server did not start")

    def __call__(self, job: dict, timeout: float) -> dict:
        base = {"workload": job["workload"], "name": job["name"]}
        try:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            self.proc.stdin.write(json.dumps({**job, "_timeout": timeout}) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout + 60)
            line = self.proc.stdout.readline() if ready else ""
        except (OSError, RuntimeError) as e:
            self.close()
            return {**base, "status": "error", "error": f"fork server failed: {e}"}
        if not line:
            self.close()
            return {**base, "status": "error", "error": "fork server died or stopped answering"}
        return json.loads(line)

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def plan(workloads, schedule_names=None, baseline_names=None, params=None, gpu=True):
    """The jobs of a run: for each workload, its schedules (all of its kind by default) and baselines."""
    jobs = []
    for text in workloads:
        wl = parse_workload(text)
        specs = ([get(n) for n in schedule_names if get(n).kind == wl.kind] if schedule_names
                 else [s for s in all_schedules(wl.kind) if not {"tuned", "tf32"} & set(s.tags) and s.accepts_dtype(wl)])
        # tuned_gemm and tf32 steps (another precision than the fp32 rows) run by name only
        for spec in specs:
            jobs.append({"workload": str(wl), "name": spec.name, "params": (params or {}).get(spec.name, {})})
        names = list(BASELINES) if baseline_names is None else list(baseline_names)
        for name in names:
            if name not in BASELINES:
                raise ValueError(f"unknown baseline {name!r} (known: {', '.join(BASELINES)})")
            if name in GPU_BASELINES and name != "tvm_dlight" and not gpu:
                continue
            jobs.append({"workload": str(wl), "name": name})
    return jobs


def run(workloads=DEFAULT_WORKLOADS, schedule_names=None, baseline_names=None, out_dir="out/run",
        timeout=300.0, params=None, progress=True, results_dir=None, fork=False):
    """The main job. Returns the results dict it wrote to ``out_dir/results.json``. ``fork``: run the
    jobs through one warm fork server (faster; each job still in its own process)."""
    for text in workloads:  # bad input fails before anything is built
        parse_workload(text)
    for n in schedule_names or ():
        get(n)
    gpu = cuda_available()
    arch = device_arch()
    os.makedirs(out_dir, exist_ok=True)
    jobs = plan(workloads, schedule_names, baseline_names, params, gpu)
    if gpu:
        jobs.insert(0, {"workload": str(parse_workload(workloads[0])), "name": "ceilings"})
    bar = Progress(len(jobs), "schedlab run") if progress else None
    prov = provenance()
    rows, ceilings = [], {}

    def results(done: bool) -> dict:
        return {"provenance": prov, "arch": arch, "gpu": gpu, "ceilings": ceilings, "complete": done,
                "rows": tables.derive(rows)}

    execute = Zygote() if fork else run_isolated
    for job in jobs:
        job.update(gpu=gpu, arch=arch, out_dir=out_dir)
        row = execute(job, timeout)
        if job["name"] == "ceilings":
            ceilings = {k: v for k, v in row.items() if k not in ("workload", "kind", "name")}
            if ceilings.get("gpu"):
                prov["gpu"] = ceilings["gpu"]
        else:
            rows.append(row)
            # after every row: a run that is cut short still leaves what it measured
            write_results(results(False), out_dir, charts_too=False)
        if bar:
            status = row.get("status")
            detail = f"{row.get('time_ms', 0):.4g} ms" if status == "ok" and "time_ms" in row else status
            bar.update(f"{job['name']} on {job['workload']}: {detail}")
    if fork:
        execute.close()
    final = results(True)
    write_results(final, out_dir)
    if results_dir:
        write_results(final, results_dir, ir=False)
    return final


def write_results(results: dict, out_dir: str, ir: bool = True, charts_too: bool = True):
    """results.json, results.csv, table.md and the charts (IR files are written by the workers)."""
    os.makedirs(out_dir, exist_ok=True)
    rows = results["rows"]
    if not ir:
        rows = [{k: v for k, v in r.items() if k not in ("files", "traceback", "stderr")} for r in rows]
        results = {**results, "rows": rows}
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1, default=float)
    tables.to_csv(rows, os.path.join(out_dir, "results.csv"))
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(tables.markdown(results))
    if not charts_too:
        return
    charts.time_chart(results, os.path.join(out_dir, "time_per_step.png"))
    charts.roofline_chart(results, os.path.join(out_dir, "roofline.png"))
