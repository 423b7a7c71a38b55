"""Stand-ins for reports.worker that fail the ways a GPU kernel can: abort, hang, garbage.
Run as a script (``python -m tests.crash_worker``, a job on stdin) or as the fork server's handler
(``handle(job)``)."""

import json
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
    elif mode == "garbage":
        print("not json")
        sys.stdout.flush()
        os._exit(0)
    row = {"workload": job["workload"], "name": job["name"], "status": "ok", "pid": os.getpid()}
    if mode == "env":  # report a variable, to check that a job's own environment reaches it
        row["value"] = os.environ.get(job["variable"])
    return row


if __name__ == "__main__":
    row = handle(json.loads(sys.stdin.read()))
    print(json.dumps(row))
