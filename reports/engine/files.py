"""Writing the lab's files safely: an output directory is checked before any work starts, and every
results file is written whole or not at all (a temporary file in the same directory, then renamed
over the old one), so a full disk or an interrupt never leaves a half-written file that a later run
would read as valid."""

from __future__ import annotations

import os
import tempfile

from tuning import records


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
    """Write ``data`` to ``path`` whole or not at all (:func:`tuning.records.atomic_write`). Raises
    OutputError (one line) on failure, leaving any previous file untouched."""
    try:
        records.atomic_write(path, data.encode() if isinstance(data, str) else data)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or type(e).__name__}") from None
