"""A damaged tuning database is found, said in one line naming the file and the line, and
recovered: the damaged file is kept aside byte for byte, every valid record is written back with
its own workload (never shifted onto another), and TVM opens the result. Built once (two
workloads, five records, no measuring), copied per case."""

import json
import os
import shutil

import pytest

WORKLOADS = (("gemm:32x32x32", 3), ("gemm:64x32x32", 2))  # (workload, records)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    import tvm
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from schedules import parse_workload
    from tuning.spaces import classic_template, enumerate_decisions, sample_insts

    db = tmp_path_factory.mktemp("pristine")
    database = ms.database.JSONDatabase(work_dir=str(db), allow_missing=True)
    target = tvm.target.Target({"kind": "llvm", "num-cores": 1})
    for text, n in WORKLOADS:
        mod = tvm.IRModule({"main": parse_workload(text).prim_func()})
        entry = database.commit_workload(mod)
        sch = s_tir.Schedule(mod)
        classic_template(sch)
        insts = sample_insts(sch.trace)
        for i, combo in enumerate(list(enumerate_decisions(sch.trace))[:n]):
            trace = sch.trace
            for inst, decision in zip(insts, combo):
                trace = trace.with_decision(inst, decision, remove_postproc=True)
            replayed = s_tir.Schedule(mod)
            trace.apply_to_schedule(replayed, remove_postproc=True)
            database.commit_tuning_record(ms.database.TuningRecord(
                replayed.trace, entry, [1e-3 * (i + 1)], target, ms.arg_info.ArgInfo.from_entry_func(replayed.mod)))
    trials = [{"run": "classic/exhaustive", "workload": WORKLOADS[0][0], "space": "classic", "trial": n + 1,
               "key": f"k{n}", "status": "build", "reason": "x"} for n in range(4)]
    (db / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trials))
    return db


@pytest.fixture
def db(pristine, tmp_path):
    shutil.copytree(pristine, tmp_path / "db")
    return tmp_path / "db"


def _lines(path):
    return path.read_bytes().split(b"\n")[:-1]


def _open(db):
    from tuning.database import open_database

    said = []
    database = open_database(str(db), say=said.append)
    return database, said


def _records(database):
    """[(rows of the record's own workload's A, rows of the A its arguments name, time in ms)]."""
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    out = []
    for r in database.database.get_all_tuning_records():
        rows_wl = int(ArgInfo.from_entry_func(r.workload.mod)[0].as_json()[2][0])
        rows_args = int(r.args_info[0].as_json()[2][0])
        out.append((rows_wl, rows_args, round(float(r.run_secs[0]) * 1e3)))
    return sorted(out)


ALL = [(32, 32, 1), (32, 32, 2), (32, 32, 3), (64, 64, 1), (64, 64, 2)]


def _one_line(said, *words):
    assert len(said) == 1 and "\n" not in said[0], said
    for w in words:
        assert w in said[0], said[0]
    return said[0]


def _aside(db, name, original):
    kept = [p for p in os.listdir(db) if p.startswith(name + ".damaged-")]
    assert len(kept) == 1, kept
    assert (db / kept[0]).read_bytes() == original  # byte for byte, never overwritten
    return kept[0]


def test_an_intact_directory_is_opened_as_it_is(db):
    before = {p: (db / p).read_bytes() for p in os.listdir(db)}
    database, said = _open(db)
    assert said == [] and _records(database) == ALL
    assert {p: (db / p).read_bytes() for p in os.listdir(db)} == before


def test_a_garbled_first_workload_line_moves_no_record(db):
    """The first workload's line lost: its records used to land on the second workload and the
    second's were dropped; now the first is rebuilt from its records' argument shapes."""
    path = db / "database_workload.json"
    original = path.read_bytes()
    lines = _lines(path)
    lines[0] = lines[0][:40] + b'\x07"garbage' + lines[0][60:]
    path.write_bytes(b"\n".join(lines) + b"\n")
    damaged = path.read_bytes()
    records = (db / "database_tuning_record.json").read_bytes()
    database, said = _open(db)
    line = _one_line(said, "database_workload.json line 1 is damaged (not JSON)", "kept aside as",
                     "5 records recovered", "1 workload rebuilt")
    assert _records(database) == ALL
    kept = _aside(db, "database_workload.json", damaged)
    assert kept in line
    _aside(db, "database_tuning_record.json", records)  # its partner, whose indices refer to it
    assert original != damaged
    again, said = _open(db)  # recovered for good: opens quietly
    assert said == [] and _records(again) == ALL


@pytest.mark.parametrize("damage, why", [
    (lambda v: b"[1,2]", "not a [hash, module] pair"),
    (lambda v: json.dumps([v[0], "!!" + v[1][2:]]).encode(), "bad base64"),
    (lambda v: json.dumps([v[0], v[1][:len(v[1]) // 2]]).encode(), "module"),  # a cut module
])
def test_a_workload_line_of_the_wrong_shape_or_bad_base64(db, damage, why):
    """Used to end in a traceback, the directory unusable until edited by hand."""
    path = db / "database_workload.json"
    lines = _lines(path)
    lines[1] = damage(json.loads(lines[1]))
    path.write_bytes(b"\n".join(lines) + b"\n")
    database, said = _open(db)
    _one_line(said, "database_workload.json line 2 is damaged", why, "5 records recovered")
    assert _records(database) == ALL


def test_a_truncated_workload_file(db):
    path = db / "database_workload.json"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) * 3 // 4])  # the second workload's line cut short
    database, said = _open(db)
    _one_line(said, "database_workload.json line 2 is damaged", "5 records recovered")
    assert _records(database) == ALL
    _aside(db, "database_workload.json", data[:len(data) * 3 // 4])


def test_random_bytes_in_the_record_file_lose_only_their_record(db):
    path = db / "database_tuning_record.json"
    lines = _lines(path)
    lines[1] = lines[1][:50] + bytes(range(200, 256)) + lines[1][50:]  # not text, no newline
    path.write_bytes(b"\n".join(lines) + b"\n")
    damaged = path.read_bytes()
    database, said = _open(db)
    _one_line(said, "database_tuning_record.json line 2 is damaged (not text)", "4 records recovered")
    assert _records(database) == [r for r in ALL if r != (32, 32, 2)]
    _aside(db, "database_tuning_record.json", damaged)
    assert not [p for p in os.listdir(db) if p.startswith("database_workload.json.")]  # unchanged: not copied


def test_records_of_the_wrong_shape_or_workload_or_one_tvm_cannot_replay(db):
    path = db / "database_tuning_record.json"
    lines = _lines(path)
    lines[0] = b"[1,2]"
    lines[3] = b"[0," + lines[3].split(b",", 1)[1]  # a 64-row record pointing at the 32-row workload
    lines[2] = lines[2].replace(b'"GetSBlock",[],["C"', b'"GetSBlock",[],["no_such_block"')
    path.write_bytes(b"\n".join(lines) + b"\n")
    database, said = _open(db)
    line = _one_line(said, "database_tuning_record.json lines 1, 3 and 4 are damaged", "3 records recovered")
    assert "not a [workload, record] pair" in line and "disagrees with its arguments" in line
    assert _records(database) == [(32, 32, 2), (64, 64, 1), (64, 64, 2)]


def test_garbage_in_the_trial_log_and_an_empty_one(db):
    path = db / "trials.jsonl"
    lines = _lines(path)
    lines[1], lines[2] = b"\x00garbage", b"[1,2]"
    path.write_bytes(b"\n".join(lines) + b"\n")
    damaged = path.read_bytes()
    _, said = _open(db)
    _one_line(said, "trials.jsonl lines 2 and 3 are damaged (not JSON; not a JSON object)", "2 of 4 lines kept")
    assert [json.loads(x)["trial"] for x in _lines(path)] == [1, 4]
    _aside(db, "trials.jsonl", damaged)
    path.write_bytes(b"")  # cut to nothing beside a database of 5 records
    _, said = _open(db)
    _one_line(said, "trials.jsonl is empty while database_tuning_record.json holds 5 records")


def test_a_candidate_measured_again_is_not_recorded_twice(db):
    """What keeps an empty or damaged trial log from duplicating the database's records."""
    from tvm import s_tir

    from tuning.spaces import enumerate_decisions, sample_insts

    database, _ = _open(db)
    first = next(r for r in database.database.get_all_tuning_records() if _records_of(r) == 32)
    entry = database.commit_workload(first.workload.mod)
    assert database.commit_tuning_record(first.trace, entry, [1.0], None, first.args_info) is False
    assert len(_lines(db / "database_tuning_record.json")) == 5
    trace = first.trace  # a configuration the database does not hold yet: recorded
    insts = sample_insts(trace)
    for inst, decision in zip(insts, list(enumerate_decisions(trace))[3]):
        trace = trace.with_decision(inst, decision, remove_postproc=True)
    sch = s_tir.Schedule(first.workload.mod)
    trace.apply_to_schedule(sch, remove_postproc=True)
    assert database.commit_tuning_record(sch.trace, entry, [1.0], None, first.args_info) is True
    assert database.commit_tuning_record(sch.trace, entry, [1.0], None, first.args_info) is False
    assert len(_lines(db / "database_tuning_record.json")) == 6


def _records_of(record):
    return int(record.args_info[0].as_json()[2][0])


def test_a_last_line_without_its_newline_gets_one(db):
    """A write cut between the line and its newline: the next append must start a new line."""
    path = db / "database_tuning_record.json"
    path.write_bytes(path.read_bytes()[:-1])
    database, said = _open(db)
    assert said == [] and _records(database) == ALL and path.read_bytes().endswith(b"]\n")
