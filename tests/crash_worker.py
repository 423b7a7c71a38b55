"""Stand-ins for the harness's job functions that fail the ways a GPU kernel can: abort, hang,
garbage on stdout, an exception. ``handle(job)`` runs in a reports.engine.isolate worker."""

import os
import sys
import time


def handle(job):
    mode = job["mode"]
    if mode == "abort":  # like a CUDA illegal address: the process dies without a result
        sys.stderr.write("CUDA error: an illegal memory access was encountered\n")
        sys.stderr.flush()
        os.abort()
    elif mode == "hang":
        time.sleep(60)
    elif mode == "print":  # a job that prints to stdout must not break the protocol
        print("some chatter on stdout")
    elif mode == "raise":
        raise RuntimeError("boom in the job")
    return {"status": "ok", "pid": os.getpid(), "value": os.environ.get(job.get("variable", ""), None), "cwd": os.getcwd()}
