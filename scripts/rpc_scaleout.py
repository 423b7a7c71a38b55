"""Scale-out of measurement over RPC: start a tracker and one RPC server per entry of ``--gpus``
(each pinned with CUDA_VISIBLE_DEVICES, in its own process group), tune with 1, 2, ... of them
under one key, report trials per minute for each, stop everything (kill the process groups).

    python -m scripts.rpc_scaleout --gpus 0,1 --workload gemm:1024x512x2048 --seconds 60   # 2 GPUs
    python -m scripts.rpc_scaleout --gpus 0,0 ...            # two servers sharing one GPU

With servers sharing a GPU, kernels of different candidates overlap on it: the throughput numbers
are measured under contention and only trials per minute is meaningful.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, env=None, log=None):
    err = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=err)


def require_tornado():
    """TVM's RPC tracker is a tornado application; the GPU machine's Python has no tornado."""
    try:
        import tornado  # noqa: F401
    except ImportError:
        raise SystemExit("the RPC tracker needs the tornado package (pure Python; carry a copy and put it on "
                         "PYTHONPATH where it is not installed)") from None


def stop(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the launcher and its popen worker child
        except ProcessLookupError:
            pass
        p.wait(10)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="0,0", help="one server per entry, pinned to that GPU")
    ap.add_argument("--workload", default="gemm:1024x512x2048")
    ap.add_argument("--space", default="tiled")
    ap.add_argument("--strategy", default="random")
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--seconds", type=float, default=60.0, help="tuning time per server count")
    ap.add_argument("--trials", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--db", default="out/rpc_scaleout")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)

    from tuning.tracker import count_rpc_servers
    from tuning.tuner import TuneOptions, tune

    require_tornado()
    gpus = [g for g in args.gpus.split(",") if g != ""]
    key = "schedlab"
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    port = free_port()
    os.makedirs(args.db, exist_ok=True)
    tracker_log = os.path.join(args.db, "tracker.log")
    procs = [start([sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                    "--port-end", str(port + 1)], env, tracker_log)]
    results = {"gpus": gpus, "workload": args.workload, "space": args.space, "strategy": args.strategy,
               "seconds": args.seconds, "runs": []}
    try:
        time.sleep(1.0)
        for gpu in gpus:
            senv = dict(env, CUDA_VISIBLE_DEVICES=gpu)
            sport = free_port()
            procs.append(start([sys.executable, "-m", "tvm.exec.rpc_server", "--host", "127.0.0.1",
                                "--port", str(sport), "--port-end", str(sport + 1),
                                "--tracker", f"127.0.0.1:{port}", "--key", key], senv))
        deadline = time.time() + 60
        while time.time() < deadline:
            if procs[0].poll() is not None:
                with open(tracker_log) as f:
                    raise SystemExit("the RPC tracker exited: " + f.read()[-1500:])
            try:
                if count_rpc_servers("127.0.0.1", port, key) >= len(gpus):
                    break
            except Exception:  # noqa: BLE001 - tracker still starting
                pass
            time.sleep(0.5)
        else:
            raise SystemExit("the RPC servers did not all register")
        for n in range(1, len(gpus) + 1):
            opts = TuneOptions(workload=args.workload, space=args.space, strategy=args.strategy,
                               trials=args.trials, batch=args.batch * n, db=os.path.join(args.db, f"servers{n}"),
                               target=args.target, rpc_tracker=f"127.0.0.1:{port}", rpc_key=key, rpc_servers=n,
                               time_limit_s=args.seconds, verify=False, seed=n)
            s = tune(opts)
            row = {"servers": n, "trials": s["trials"], "session_s": s["session_s"],
                   "trials_per_minute": s["session_trials_per_minute"],
                   "best_gflops": (s.get("best") or {}).get("gflops")}
            results["runs"].append(row)
            print(json.dumps(row), flush=True)
    finally:
        stop(procs)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    main()
