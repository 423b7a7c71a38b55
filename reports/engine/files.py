"""Writing the lab's files safely: an output directory is checked before any work starts, and every
results file is written whole or not at all (a temporary file in the same directory, then renamed
over the old one), so a full disk or an interrupt never leaves a half-written file that a later run
would read as valid."""

from __future__ import annotations

import os
import tempfile


class OutputError(ValueError):
    """An output directory or file that cannot be written; the message names it and says why."""


def ensure_out_dir(path: str, what: str = "--out") -> str:
    """Create ``path`` if needed and check that files can be written in it. Raises OutputError with
    one line naming the directory and the reason."""
    if not path:
        raise OutputError(f"{what}: no directory given")
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{what} {path}: exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-check-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise OutputError(f"{what} {path}: cannot write there ({e.strerror or type(e).__name__})") from None
    return path


def atomic_write(path: str, data: str | bytes):
    """Write ``data`` to ``path`` whole or not at all. Raises OutputError (one line) on failure,
    leaving any previous file untouched."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + "-")
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary file would be (mkstemp makes it private)
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or type(e).__name__}") from None
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
