"""The RPC tracker a tuning run measures through (``--rpc-tracker HOST:PORT``), checked before the
run: TVM's own client retries a refused connection for over a minute, and waits forever on a
server that accepts the connection but is not a tracker (any other server on that port). Here
the connection, the tracker's handshake (its magic number, echoed) and its summary each have a
time limit, and every failure is one line naming the address."""

from __future__ import annotations

import json
import socket
import struct

HANDSHAKE_TIMEOUT_S = 5.0
MAX_REPLY_BYTES = 16 << 20


def parse_tracker(text: str) -> tuple[str, int]:
    host, sep, port = (text or "").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--rpc-tracker {text!r} is malformed: expected HOST:PORT")
    return host, int(port)


def _recv(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 65536))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        out += chunk
    return out


def probe_tracker(host: str, port: int, timeout: float | None = None) -> dict:
    """The tracker's summary (``server_info``, ``queue_info``), asked with TVM's tracker protocol;
    each step waits at most ``timeout`` seconds. Raises ValueError (one line) when nothing answers
    at ``host:port`` or what answers is not an RPC tracker."""
    from tvm.rpc import base  # heavy (TVM): where a tracker is asked

    timeout = HANDSHAKE_TIMEOUT_S if timeout is None else timeout
    where = f"--rpc-tracker {host}:{port}"
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        raise ValueError(f"{where}: no RPC tracker answers there ({e.strerror or type(e).__name__})") from None
    not_tracker = f"{where}: the server there is not an RPC tracker"
    try:
        with sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            if struct.unpack("<i", _recv(sock, 4))[0] != base.RPC_TRACKER_MAGIC:
                raise ValueError(f"{not_tracker} (it answered the tracker handshake with something else)")
            payload = json.dumps([base.TrackerCode.SUMMARY]).encode()
            sock.sendall(struct.pack("<i", len(payload)) + payload)
            size = struct.unpack("<i", _recv(sock, 4))[0]
            if not 0 < size <= MAX_REPLY_BYTES:
                raise ValueError(f"{not_tracker} (its answer to a summary request is not one)")
            reply = json.loads(_recv(sock, size))
    except TimeoutError:
        raise ValueError(f"{not_tracker} (no answer to the tracker handshake within {timeout:g} s)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{not_tracker} ({e.strerror if isinstance(e, OSError) and e.strerror else e})") from None
    if not (isinstance(reply, list) and len(reply) == 2 and reply[0] == base.TrackerCode.SUCCESS
            and isinstance(reply[1], dict)):
        raise ValueError(f"{not_tracker} (its answer to a summary request is not one)")
    return reply[1]


def count_rpc_servers(host: str, port: int, key: str) -> int:
    """Servers registered under ``key`` at the tracker (free or busy)."""
    summary = probe_tracker(host, port)
    n = sum(1 for s in summary.get("server_info", []) if isinstance(s, dict)
            and str(s.get("key", "")).split(":")[-1] == key)
    queue = summary.get("queue_info", {})
    free = queue.get(key, {}).get("free", 0) if isinstance(queue, dict) and isinstance(queue.get(key), dict) else 0
    return max(n, int(free) if isinstance(free, int) else 0)
