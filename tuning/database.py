"""A tuning directory's files, checked line by line before use and recovered when damaged.

MetaSchedule's JSONDatabase is two files of JSON lines: ``database_workload.json`` (line *i*:
``[structural hash, base64 of the IRModule]``) and ``database_tuning_record.json`` (``[i, [trace,
run seconds, target, argument info]]``: a record names its workload by its line number in the
other file). TVM reads them without a word about damage: a lost workload line shifts every record
after it onto the next workload, a line of the wrong shape ends in a traceback. So every line is
checked here first (JSON, shape, base64, a module TVM can load, a record's arguments against its
workload's) and, where one is damaged:

- the damaged file is kept aside as ``<name>.damaged-<time>`` (with its partner file, whose
  indices refer to it) and never overwritten; the valid lines are written back (atomically);
- each record keeps its own workload: indices are remapped to the written workload lines; a record
  whose workload line is lost (or whose index disagrees with its arguments) goes to the workload
  its argument shapes describe (``schedlab tune`` tunes nn GEMMs, ``A`` M×K, ``B`` K×N), rebuilt
  when no line holds it; one that fits none is dropped from the written file only;
- one line per damaged file says what happened: ``tuning database: database_workload.json line 1
  is damaged (not JSON); kept aside as ...; 5 of 5 records recovered``.

Records that pass these checks but still stop TVM (a trace that no longer applies) are found by
reading each record through TVM, and handled the same way. ``trials.jsonl`` (the lab's trial log)
is checked likewise; an empty log beside a database that holds records (a log cut to nothing) is
reported, and :class:`TuningDatabase` never records a candidate twice, so measuring those trials
again does not repeat the database's records.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import time

import tvm
import tvm_ffi
from tvm.s_tir import meta_schedule as ms

from schedules import parse_workload

from . import records as R


def say_stderr(msg: str):
    print(msg, file=sys.stderr, flush=True)


def _numbers_as_floats(value):
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    if isinstance(value, dict):
        return {k: _numbers_as_floats(v) for k, v in value.items()}
    return value


def canonical(value) -> str:
    """One text per JSON value, whatever the file's spacing and number spelling (TVM writes a trace's
    booleans as 0 and 1, and reads them back as booleans)."""
    return json.dumps(_numbers_as_floats(R.plain(value)), sort_keys=True, separators=(",", ":"))


def _lines(path: str) -> tuple[list[bytes], bool]:
    """The file's lines (its last one without a newline included) and whether it exists."""
    if not os.path.exists(path):
        return [], False
    with open(path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines, True


def _end_last_line(path: str):
    """Give a file whose last line is complete JSON without its newline (a write cut between the
    two) that newline, so that the next append starts a line of its own."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() == 0:
                return
            f.seek(max(0, f.tell() - 1))
            if f.read(1) == b"\n":
                return
            f.seek(0)
            last = f.read().rsplit(b"\n", 1)[-1]
    except OSError:
        return
    if _json(last)[1] is None:
        with open(path, "ab") as f:
            f.write(b"\n")


def _tvm_why(e: Exception) -> str:
    """A short reason from a TVM error (whose text may be only "(not rendered)")."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip() and ln.strip() != "(not rendered)"]
    return lines[-1][:80] if lines else type(e).__name__


def _json(line: bytes):
    """(value, None) or (None, why the line is not JSON)."""
    if not line.strip():
        return None, "empty"
    try:
        return json.loads(line), None
    except UnicodeDecodeError:
        return None, "not text"
    except ValueError:
        return None, "not JSON"


# --- workloads ----------------------------------------------------------------------------------
def _load_workload(value):
    """(IRModule, None) or (None, why this workload line is not one)."""
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        return None, "not a [hash, module] pair"
    try:
        blob = base64.b64decode(value[1], validate=True)
    except ValueError:
        return None, "bad base64"
    # TVM's base64 holds a length-prefixed JSON graph
    if len(blob) < 8 or struct.unpack("<Q", blob[:8])[0] != len(blob) - 8:
        return None, "module cut short"
    try:
        graph = json.loads(blob[8:])
    except ValueError:
        return None, "module not JSON"
    if not (isinstance(graph, dict) and "root_index" in graph and "nodes" in graph):
        return None, "not a module"
    try:
        mod = ms.database.Workload.from_json(value).mod
    except Exception as e:  # noqa: BLE001 - TVM's message says which part it could not read
        return None, f"TVM cannot read its module: {_tvm_why(e)}"
    return mod, None


def _args_of(mod) -> str:
    return canonical([a.as_json() for a in ms.arg_info.ArgInfo.from_entry_func(mod)])


def gemm_from_args(args):
    """The module of the nn GEMM that argument info ``[[TENSOR, dtype, [M, K]], [.., [K, N]],
    [.., [M, N]]]`` describes (what ``schedlab tune`` commits for ``gemm:MxNxK[:dtype]``), or None."""
    try:
        (_, dt, (m, k)), (_, dt_b, (k_b, n)), (_, _, (m_c, n_c)) = args
        if dt != dt_b or (k, m, n) != (k_b, m_c, n_c) or min(m, n, k) < 1:
            return None
        wl = parse_workload(f"gemm:{m}x{n}x{k}" + ("" if dt == "float32" else f":{dt}"))
        mod = tvm.IRModule({"main": wl.prim_func()})
    except Exception:  # noqa: BLE001 - not a GEMM the tuner makes
        return None
    return mod if _args_of(mod) == canonical(args) else None


class _Workloads:
    """The valid workload lines, deduplicated (TVM numbers a new workload by how many distinct
    ones it holds, so a repeated line would shift later commits), and the ones rebuilt."""

    def __init__(self):
        self.mods, self.args = [], []  # by new index
        self.by_hash: dict[int, list[int]] = {}

    def index_of(self, mod) -> int | None:
        for n in self.by_hash.get(tvm_ffi.structural_hash(mod), []):
            if tvm_ffi.structural_equal(self.mods[n], mod):
                return n
        return None

    def add(self, mod) -> tuple[int, bool]:
        """(new index, whether it is new)."""
        n = self.index_of(mod)
        if n is not None:
            return n, False
        self.mods.append(mod)
        self.args.append(_args_of(mod))
        self.by_hash.setdefault(tvm_ffi.structural_hash(mod), []).append(len(self.mods) - 1)
        return len(self.mods) - 1, True

    def line(self, n: int) -> bytes:
        return json.dumps(R.plain(ms.database.Workload(self.mods[n]).as_json())).encode()


# --- the check ------------------------------------------------------------------------------------
class _Check:
    """What reading a directory's database files found, and the files as they should be."""

    def __init__(self, db_dir: str, deep: bool):
        self.wl_path = os.path.join(db_dir, R.WORKLOAD_FILE)
        self.rec_path = os.path.join(db_dir, R.RECORD_FILE)
        self.wl_bad: list[tuple[int, str]] = []  # (line number, why)
        self.rec_bad: list[tuple[int, str]] = []
        self.records: list[tuple[int, bytes]] = []  # (new workload index, the record's line)
        self.lost = 0  # records whose workload is gone and cannot be rebuilt
        self.rehomed = 0  # records moved to the workload their arguments describe
        self.rebuilt = 0  # workloads rebuilt from records' arguments
        self.workloads = _Workloads()
        self.wl_lines_out: list[bytes] = []
        self.old_to_new: dict[int, int] = {}
        self._first_lines: list[int] = []  # new index -> its line in the file
        self.wl_lines_in, _ = _lines(self.wl_path)
        self.rec_lines_in, _ = _lines(self.rec_path)
        self._read_workloads()
        self._read_records(deep)

    def _read_workloads(self):
        for i, line in enumerate(self.wl_lines_in):
            value, why = _json(line)
            mod = None
            if why is None:
                mod, why = _load_workload(value)
            if why is not None:
                self.wl_bad.append((i + 1, why))
                continue
            n, new = self.workloads.add(mod)
            if new:
                self.wl_lines_out.append(line.rstrip(b"\r"))
                self._first_lines.append(i)
            else:
                self.wl_bad.append((i + 1, f"repeats line {self._first_lines[n] + 1}"))
            self.old_to_new[i] = n

    def _home(self, args, rebuilt: dict) -> int | None:
        """The workload index a record with these arguments belongs to (rebuilt if need be)."""
        key = canonical(args)
        matches = [n for n, a in enumerate(self.workloads.args) if a == key]
        if len(matches) == 1:
            return matches[0]
        if matches or key in rebuilt:
            return rebuilt.get(key)
        mod = gemm_from_args(args)
        n = None
        if mod is not None:
            n, new = self.workloads.add(mod)
            if new:
                self.wl_lines_out.append(self.workloads.line(n))
                self.rebuilt += 1
        rebuilt[key] = n
        return n

    def _read_records(self, deep: bool):
        rebuilt: dict = {}
        entries: dict = {}  # new index -> its Workload (for TVM's reading of a record)
        for i, line in enumerate(self.rec_lines_in):
            value, why = _json(line)
            if why is None and not (isinstance(value, list) and len(value) == 2 and type(value[0]) is int
                                    and isinstance(value[1], list) and len(value[1]) == 4
                                    and isinstance(value[1][0], list) and len(value[1][0]) == 2):
                why = "not a [workload, record] pair"
            if why is not None:
                self.rec_bad.append((i + 1, why))
                continue
            index, (trace, secs, target, args) = value
            home = self.old_to_new.get(index)
            if args is not None and home is not None and self.workloads.args[home] != canonical(args):
                self.rec_bad.append((i + 1, "its workload index disagrees with its arguments"))
                home = None
            if home is None:
                home = self._home(args, rebuilt) if args is not None else None
                if home is None:
                    self.lost += 1
                    continue
                self.rehomed += 1
            if deep:
                if home not in entries:
                    entries[home] = ms.database.Workload(self.workloads.mods[home])
                try:
                    ms.database.TuningRecord.from_json(value[1], entries[home])
                except Exception as e:  # noqa: BLE001 - TVM cannot replay it
                    self.rec_bad.append((i + 1, f"TVM cannot replay it: {_tvm_why(e)}"))
                    continue
            self.records.append((home, line.rstrip(b"\r")))

    def changed(self) -> bool:
        return self.wl_lines_out != self.wl_lines_in or self.record_lines() != self.rec_lines_in

    def record_lines(self) -> list[bytes]:
        # the index is the line's first field: replace it, keep the rest as written
        return [b"[%d," % n + line.split(b",", 1)[1] for n, line in self.records]

    def trace_keys(self) -> dict[int, set]:
        out: dict[int, set] = {}
        for n, line in self.records:
            out.setdefault(n, set()).add(canonical(json.loads(line)[1][0]))
        return out


def _lines_text(bad: list[tuple[int, str]]) -> str:
    numbers = [n for n, _ in bad]
    if len(numbers) == 1:
        where = f"line {numbers[0]} is"
    elif len(numbers) <= 4:
        where = f"lines {', '.join(map(str, numbers[:-1]))} and {numbers[-1]} are"
    else:
        where = f"lines {', '.join(map(str, numbers[:3]))} and {len(numbers) - 3} more are"
    reasons = sorted({why for _, why in bad}, key=[why for _, why in bad].index)
    return f"{where} damaged ({'; '.join(reasons[:3])})"


def keep_aside(paths: list[str], stamp: str | None = None) -> list[str]:
    """Copy each existing file to ``<path>.damaged-<time>`` (a hard link where the file system
    allows: the bytes as they were), never over an existing file. Returns the copies' paths."""
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    suffix, n = f".damaged-{stamp}", 1
    while any(os.path.exists(p + suffix) for p in paths):
        n += 1
        suffix = f".damaged-{stamp}-{n}"
    out = []
    for p in paths:
        if not os.path.exists(p):
            continue
        try:
            os.link(p, p + suffix)
        except OSError:
            with open(p, "rb") as src:
                R.atomic_write(p + suffix, src.read())
        out.append(p + suffix)
    return out


def _write(path: str, lines: list[bytes]):
    R.atomic_write(path, b"".join(line + b"\n" for line in lines))


def _recover(check: _Check, say):
    """Keep aside each database file that changes and write back what ``check`` found valid (the
    workload lines kept or rebuilt, every record with its index remapped); say so in one line."""
    out = [(check.wl_path, check.wl_lines_in, check.wl_lines_out),
           (check.rec_path, check.rec_lines_in, check.record_lines())]
    changing = [(path, new) for path, old, new in out if new != old]
    aside = keep_aside([path for path, _ in changing])
    for path, new in changing:
        _write(path, new)
    parts = []
    if check.wl_bad:
        parts.append(f"{R.WORKLOAD_FILE} {_lines_text(check.wl_bad)}")
    if check.rec_bad:
        parts.append(f"{R.RECORD_FILE} {_lines_text(check.rec_bad)}")
    if not parts:  # whole lines missing at the end of the workload file
        parts.append(f"{R.WORKLOAD_FILE} lacks the workload of {check.rehomed + check.lost} records")
    names = [os.path.basename(p) for p in aside]
    kept = f"kept aside as {names[0]}" + (f" (with {names[1]})" if len(names) > 1 else "") if names else ""
    done = f"{len(check.records)} records recovered"
    if check.rebuilt:
        done += f" ({check.rebuilt} workload{'s' * (check.rebuilt > 1)} rebuilt from the records' argument shapes)"
    if check.lost:
        done += f", {check.lost} lost (no workload fits their arguments)"
    say("tuning database: " + "; ".join(x for x in (", ".join(parts), kept, done) if x))


# --- the trial log --------------------------------------------------------------------------------
def _trial_row_problem(row) -> str | None:
    if not isinstance(row, dict):
        return "not a JSON object"
    if not (isinstance(row.get("run"), str) and isinstance(row.get("workload"), str)
            and isinstance(row.get("status"), str)):
        return "no run, workload or status"
    if row["status"] == "verify":
        return None if isinstance(row.get("key"), str) else "a check without its key"
    if not (type(row.get("trial")) is int and row["trial"] >= 1 and isinstance(row.get("key"), str)):
        return "no trial number or key"
    if row["status"] == "ok" and not all(isinstance(row.get(k), (int, float)) for k in ("time_ms", "gflops")):
        return "a measured trial without its time"
    return None


def check_trials(db_dir: str, n_records: int, say) -> None:
    """Check every line of the trial log; keep a damaged log aside and write back its valid lines."""
    path = os.path.join(db_dir, R.TRIALS_FILE)
    lines, exists = _lines(path)
    if exists and not lines and n_records:
        say(f"tuning database: {R.TRIALS_FILE} is empty while {R.RECORD_FILE} holds {n_records} records (the "
            "trial log was cut): its trials are measured again, without repeating database records")
        return
    good, bad = [], []
    for i, line in enumerate(lines):
        value, why = _json(line)
        why = why or _trial_row_problem(value)
        if why is None:
            good.append(line.rstrip(b"\r"))
        else:
            bad.append((i + 1, why))
    if not bad:
        return
    aside = keep_aside([path])
    _write(path, good)
    say(f"tuning database: {R.TRIALS_FILE} {_lines_text(bad)}; kept aside as {os.path.basename(aside[0])}; "
        f"{len(good)} of {len(lines)} lines kept (a lost trial is measured again, under a new trial number)")


# --- opening --------------------------------------------------------------------------------------
class TuningDatabase:
    """MetaSchedule's JSONDatabase of a checked directory, which records a candidate (a trace of a
    workload) once: measuring a trial again, after its log line was lost, adds no second record."""

    def __init__(self, database, workloads: _Workloads, keys: dict[int, set]):
        self.database, self._workloads, self._keys = database, workloads, keys
        self._committed: list[tuple] = []  # (workload entry, its traces' keys)

    def commit_workload(self, mod):
        entry = self.database.commit_workload(mod)
        n = self._workloads.index_of(mod)
        self._committed.append((entry, set(self._keys.get(n, ())) if n is not None else set()))
        return entry

    def commit_tuning_record(self, trace, workload, secs, target, args_info) -> bool:
        """Record a measured candidate unless this workload already has its trace."""
        seen = next((keys for entry, keys in self._committed if entry is workload), None)
        if seen is None:
            seen = set()
            self._committed.append((workload, seen))
        key = canonical(trace.as_json())
        if key in seen:
            return False
        self.database.commit_tuning_record(ms.database.TuningRecord(trace, workload, secs, target, args_info))
        seen.add(key)
        return True

    def __len__(self):
        return len(self.database)


def open_database(db_dir: str, say=say_stderr) -> TuningDatabase:
    """Check the directory's files (recovering damaged ones, one line each through ``say``), then
    open MetaSchedule's JSONDatabase in it. Raises ValueError (one line) if TVM still cannot."""
    for name in (R.WORKLOAD_FILE, R.RECORD_FILE, R.TRIALS_FILE):
        _end_last_line(os.path.join(db_dir, name))
    check = _Check(db_dir, deep=False)
    if check.changed():
        check = _Check(db_dir, deep=True)  # the files are rewritten: check every record through TVM
        _recover(check, say)
    check_trials(db_dir, len(check.records), say)
    try:
        database = ms.database.JSONDatabase(work_dir=db_dir, allow_missing=True)
    except Exception:  # noqa: BLE001 - damage the line checks cannot see (a trace that does not apply)
        check = _Check(db_dir, deep=True)
        if check.changed():
            _recover(check, say)
        try:
            database = ms.database.JSONDatabase(work_dir=db_dir, allow_missing=True)
        except Exception as e:  # noqa: BLE001
            why = _tvm_why(e)
            raise ValueError(f"tuning database in {db_dir}: TVM cannot read it ({why}); move its "
                             f"{R.WORKLOAD_FILE} and {R.RECORD_FILE} aside") from None
    return TuningDatabase(database, check.workloads, check.trace_keys())
