"""Hostile input and interruptions: each is a one-line error with exit code 2 (or 130 for Ctrl-C)
before anything is built, or a correct recovery; never a traceback, a hang, a leftover process or
a half-written file that a later run reads as valid."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from scripts.schedlab import main
from tests.conftest import HAS_GPU

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _one_line_error(capsys, argv, word):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert word in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_an_output_directory_that_cannot_be_written(tmp_path, capsys):
    a_file = tmp_path / "results.txt"
    a_file.write_text("x")
    _one_line_error(capsys, ["run", "--workload", "gemm:8x8x8", "--out", str(a_file)], "is not a directory")
    _one_line_error(capsys, ["run", "--workload", "gemm:8x8x8", "--out", "/proc/schedlab"], "cannot write there")
    _one_line_error(capsys, ["bench-gemv", "--out", str(a_file)], "is not a directory")
    assert a_file.read_text() == "x"


@pytest.mark.parametrize("value", ["-1", "0", "inf", "nan"])
def test_a_time_limit_must_be_positive(value, tmp_path, capsys):
    _one_line_error(capsys, ["run", "--workload", "gemm:8x8x8", "--timeout", value, "--out", str(tmp_path)],
                    "--timeout must be a positive number")


def test_a_workload_too_large_for_memory_is_refused_once(tmp_path, capsys):
    out = tmp_path / "out"
    err = _one_line_error(capsys, ["run", "--workload", "gemm:200000x200000x200000", "--out", str(out)],
                          "gemm:200000x200000x200000 needs")
    assert "memory" in err and " has " in err
    assert not out.exists()  # refused before anything was made, the output folder included


@pytest.mark.parametrize("args, words", [
    (["--workers", "0"], "--workers must be a whole number"), (["--workers", "-2"], "--workers must be a whole number"),
    (["--schedules", ""], "--schedules names no schedule"), (["--schedules", " , "], "--schedules names no schedule"),
    (["--schedules", "naive_gemm", "--param", "bogus=3"], "unknown parameter 'bogus'"),
    (["--schedules", "shared_cache_gemm", "--param", "tile_m=abc"], "tile_m must be int"),
])
def test_run_refuses_what_show_refuses_in_one_line(args, words, tmp_path, capsys):
    """Each used to run (every step for an empty --schedules, an error row and exit 0 for a bad
    --param, a pool of no workers); now a one-line error and exit 2, before any folder is made."""
    out = tmp_path / "out"
    _one_line_error(capsys, ["run", "--workload", "gemm:8x8x8", *args, "--out", str(out)], words)
    assert not out.exists()


def test_the_python_api_takes_one_name_or_a_list_and_says_what_is_wrong(tmp_path):
    from reports import load_results, run
    from reports.engine.results import ResultsError
    from schedules import ScheduleParamError

    df = run("gemm:16x16x16", schedules="naive_gemm", baselines=[], out_dir=str(tmp_path / "a"), progress=False,
             report=False, gpu=False)  # one workload and one step as plain strings, not their characters
    assert list(df["name"]) == ["naive_gemm"] and list(df["workload"]) == ["gemm:16x16x16"]
    with pytest.raises(ScheduleParamError, match="--timeout must be a positive number"):
        run(["gemm:16x16x16"], timeout="10", out_dir=str(tmp_path / "b"))
    with pytest.raises(ResultsError, match="takes a results directory or file path, got NoneType"):
        load_results(None)
    assert not (tmp_path / "b").exists()


def test_an_rpc_tracker_that_is_not_there_is_named_within_seconds(tmp_path, capsys):
    t0 = time.time()
    err = _one_line_error(capsys, ["tune", "--workload", "gemm:64x64x64", "--rpc-tracker", "127.0.0.1:1",
                                   "--rpc-key", "x", "--db", str(tmp_path / "db"), "--quiet"],
                          "--rpc-tracker 127.0.0.1:1: no RPC tracker answers there")
    assert time.time() - t0 < 10, err


def test_two_tuners_on_one_directory(tmp_path, capsys):
    from tuning.records import DirectoryLock

    db = tmp_path / "db"
    os.makedirs(db)
    with DirectoryLock(str(db)):
        _one_line_error(capsys, ["tune", "--workload", "gemm:64x64x64", "--target", "llvm", "--space", "classic",
                                 "--db", str(db), "--quiet"], "is being tuned by schedlab tune (pid")
    with DirectoryLock(str(db)):  # released with its holder
        pass


@pytest.mark.parametrize("content, word", [("not json", "not readable JSON"), ('{"workload": "x"}', "no saved trace"),
                                           (None, "no tuned configuration")])
def test_garbage_in_schedlab_tuned(tmp_path, monkeypatch, capsys, content, word):
    target = tmp_path / "best_gemm_64x64x64.json"
    if content is not None:
        target.write_text(content)
    monkeypatch.setenv("SCHEDLAB_TUNED", str(target if content is not None else tmp_path / "nowhere"))
    _one_line_error(capsys, ["show", "tuned_gemm", "--shape", "64x64x64"], word)


def test_a_corrupt_or_empty_results_directory_for_report(tmp_path, capsys):
    _one_line_error(capsys, ["report", str(tmp_path)], "no results here")
    (tmp_path / "results.json").write_text('{"rows": [')
    _one_line_error(capsys, ["report", str(tmp_path)], "not a readable results file")
    assert not (tmp_path / "report.html").exists()  # no partial page left behind


# a run whose kernels build one at a time (one worker): the first is built seconds before the last
RUN = ["-m", "scripts.schedlab", "run", "--workload", "gemm:96x80x40", "--schedules",
       "naive_gemm,thread_1d_gemm,thread_2d_gemm,shared_cache_gemm,block_tiling_gemm", "--baselines", "numpy_cpu",
       "--workers", "1"]
FIRST_BUILT = "naive_gemm on gemm:96x80x40: built"  # the progress line of the first kernel built
EARLIER = {"results.json": json.dumps({"meta": {"complete": True, "kind": "run"}, "rows": [
    {"workload": "gemm:8x8x8", "name": "naive_gemm", "status": "no-gpu"}]}), "table.md": "the earlier table\n",
    "report.html": "<p>the earlier page</p>\n", "ir/gemm_8x8x8/naive_gemm.cu": "// the earlier IR\n"}


def _files(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _left_running(processes) -> list:
    import psutil

    time.sleep(0.5)
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _kept_rows(partial) -> dict:
    """The interrupted run's rows by name: its partial result, marked incomplete, with the first kernel
    built (no GPU: built, not timed) and its IR files where results.json says they are."""
    res = json.loads((partial / "results.json").read_text())
    assert res["meta"]["complete"] is False
    rows = {r["name"]: r for r in res["rows"]}
    first = rows["naive_gemm"]
    assert first["status"] == "no-gpu" and first["registers"] > 0
    for path in first["files"].values():
        assert os.path.isfile(path) and path.startswith(str(partial) + os.sep), path
    assert len(rows) < 5  # cut short: not every kernel was built
    return rows


@pytest.mark.skipif(HAS_GPU, reason="interrupts the no-GPU build phase")
def test_ctrl_c_in_a_terminal_mid_build_keeps_the_built_rows_and_the_earlier_result(tmp_path):
    """Ctrl-C typed in a terminal (a pty: SIGINT to the foreground process group) while kernels are
    being built over an earlier complete result: the earlier files are untouched, the rows of the
    kernels built so far are kept in OUT/partial, and no process is left."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    out = tmp_path / "run"
    for name, text in EARLIER.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    before = _files(out)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, on the terminal
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, *RUN, "--out", str(out)], _env())
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
    screen, deadline, children, status = b"", time.time() + 120, [], None

    def read(seconds):
        nonlocal screen
        ready, _, _ = select.select([fd], [], [], seconds)
        if ready:
            try:
                screen += os.read(fd, 65536)
            except OSError:  # the terminal closed: the command ended
                return False
        return True

    try:
        while FIRST_BUILT.encode() not in screen and time.time() < deadline and read(0.2):
            pass
        assert FIRST_BUILT.encode() in screen, screen.decode(errors="replace")[-2000:]
        children = _descendants(pid)
        os.write(fd, b"\x03")  # Ctrl-C
        while time.time() < deadline and read(1):
            pass
        _, status = os.waitpid(pid, 0)
    finally:
        if status is None:  # the test failed before the command ended
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    text = screen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 130, text[-2000:]
    after = _files(out)
    assert {k: v for k, v in after.items() if not k.startswith("partial/")} == before  # the earlier result as it was
    _kept_rows(out / "partial")
    assert not _left_running(children)
    assert "Traceback" not in text and "schedlab: interrupted; " in text and "partial" in text
    assert "the complete results of an earlier run" in text


@pytest.mark.skipif(HAS_GPU, reason="interrupts the no-GPU build phase")
def test_sigterm_mid_build_from_another_folder(tmp_path):
    """SIGTERM while kernels are being built, the run started in another folder with a relative
    --out: the IR is under that folder (not the lab's), the built rows are kept with their IR paths,
    the command exits 143, and no worker outlives it."""
    import threading

    proc = subprocess.Popen([sys.executable, *RUN, "--out", "rel/out"], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and not any(FIRST_BUILT in x for x in lines):
        time.sleep(0.1)
    children = _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    err = "".join(lines)
    assert any(FIRST_BUILT in x for x in lines), err[-2000:]
    assert not _left_running(children)
    assert not os.path.exists(os.path.join(ROOT, "rel"))  # nothing under the lab's own folder
    _kept_rows(tmp_path / "rel" / "out" / "partial")
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and "schedlab: terminated; " in err


def test_ctrl_c_during_tuning_then_resume(tmp_path):
    db = tmp_path / "db"
    cmd = [sys.executable, "-m", "scripts.schedlab", "tune", "--target", "llvm", "--space", "classic",
           "--workload", "gemm:64x64x64", "--trials", "12", "--batch", "2", "--builders", "1", "--db", str(db),
           "--compare", "none", "--quiet"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    trials = db / "trials.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (trials.exists() and trials.read_text().count("\n") >= 2):
        if proc.poll() is not None:
            pytest.fail("the tuner ended before it could be interrupted")
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr and "the same command resumes" in stderr
    kept = [json.loads(x) for x in trials.read_text().splitlines() if x.strip()]
    assert kept
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(x) for x in trials.read_text().splitlines() if x.strip()]
    assert len([r for r in rows if r.get("status") != "verify"]) == 12
