"""Writing the lab's files safely: an output directory is checked before any work starts, and every
results file is written whole or not at all (a temporary file in the same directory, then renamed
over the old one), so a full disk or an interrupt never leaves a half-written file that a later run
would read as valid.

A run's files in its folder (:data:`RUN_FILES`) come from one run: a run writes them in
``OUT/partial/`` as it goes, and only a complete run moves them into ``OUT``, all together
(:func:`replace_run_files`); a run cut short leaves them in ``OUT/partial/`` and an earlier
complete result in ``OUT`` as it was."""

from __future__ import annotations

import os
import shutil
import signal
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


PARTIAL = "partial"  # OUT/partial: the files of a run in progress, or of one cut short
RUN_FILES = ("results.json", "results.csv", "table.md", "time_per_step.png", "roofline.png", "report.html", "ir")


def fresh_dir(path: str) -> str:
    """``path`` as an empty directory (what was there is removed)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)
    os.makedirs(path)
    return path


def replace_run_files(src: str, dest: str, names=RUN_FILES):
    """Move the run files ``names`` from ``src`` into ``dest``, replacing ``dest``'s, and remove those
    of them ``src`` lacks from ``dest`` (an earlier page beside results it was not made from); then
    remove ``src``. Ctrl-C and SIGTERM wait until the renames are done, so that ``dest`` is never
    half one run and half another (nor ``src`` left behind as if a run had been cut short)."""
    old = os.path.join(src, ".replaced")
    os.makedirs(old, exist_ok=True)
    deferred = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, deferred)
    try:
        for name in names:
            there = os.path.join(dest, name)
            if os.path.lexists(there):
                os.replace(there, os.path.join(old, name))  # directories too: out of the way in one rename
            if os.path.lexists(os.path.join(src, name)):
                os.replace(os.path.join(src, name), there)
        shutil.rmtree(src, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, deferred)
