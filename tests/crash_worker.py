"""Stand-ins for reports.worker that fail the ways a GPU kernel can: abort, hang, garbage."""

import json
import os
import sys
import time

job = json.loads(sys.stdin.read())
mode = job["mode"]
if mode == "abort":  # like a CUDA illegal address: the process dies without a result
    sys.stderr.write("CUDA error: an illegal memory access was encountered\n")
    sys.stderr.flush()
    os.abort()
elif mode == "hang":
    time.sleep(60)
elif mode == "garbage":
    print("not json")
