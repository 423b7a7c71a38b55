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


class _NotATracker:
    """A loopback server that is not an RPC tracker: it accepts connections, then says nothing
    (``reply`` None) or answers with ``reply``."""

    def __init__(self, reply=None):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port, self.reply, self.conns = self.sock.getsockname()[1], reply, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.reply is not None:
                conn.recv(64)
                conn.sendall(self.reply)

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("reply, words", [(None, "no answer to the tracker handshake within 1 s"),
                                          (b"HTTP/1.0 400 Bad Request\r\n\r\n", "answered the tracker handshake with")])
def test_an_rpc_tracker_address_with_another_server_behind_it(tmp_path, capsys, monkeypatch, reply, words):
    """It used to hang with no output until killed (TVM's client waits for the handshake forever)."""
    from tuning import tracker

    monkeypatch.setattr(tracker, "HANDSHAKE_TIMEOUT_S", 1.0)
    server = _NotATracker(reply)
    try:
        t0 = time.time()
        err = _one_line_error(capsys, ["tune", "--workload", "gemm:64x64x64", "--rpc-tracker",
                                       f"127.0.0.1:{server.port}", "--rpc-key", "x", "--db", str(tmp_path / "db"),
                                       "--quiet"], f"--rpc-tracker 127.0.0.1:{server.port}: the server there is not "
                                                   "an RPC tracker")
        assert words in err and time.time() - t0 < 10, err
    finally:
        server.close()
    assert not (tmp_path / "db").exists()


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present")
def test_tuning_for_a_gpu_on_a_machine_without_one_is_refused(tmp_path, capsys):
    """It used to log every trial as failed (a loader not registered), say "no valid configuration
    found", exit 0, and leave those trials counted as done for a later run on a GPU machine."""
    db = tmp_path / "db"
    _one_line_error(capsys, ["tune", "--workload", "gemm:64x64x64", "--db", str(db), "--quiet"],
                    "--target cuda: this machine has no CUDA GPU to measure on")
    assert not db.exists()


def test_a_tuning_directory_keeps_its_target(tmp_path, capsys):
    """A run for another target than the directory's trials is refused, before anything is written
    there (it used to mix the targets' trials in one run)."""
    from tuning.records import append_jsonl, save_json

    db = tmp_path / "db"
    os.makedirs(db)
    save_json(str(db / "provenance.json"), {"gpu": "NVIDIA H100", "target": "cuda", "timer": "cold"})
    append_jsonl(str(db / "trials.jsonl"), {"run": "classic/exhaustive", "workload": "gemm:64x64x64", "trial": 1,
                                            "key": "k", "status": "run", "reason": "x"})
    before = sorted(os.listdir(db))
    _one_line_error(capsys, ["tune", "--workload", "gemm:32x32x32", "--target", "llvm", "--space", "classic", "--db",
                             str(db), "--quiet"],
                    f"{db} holds trials measured for --target cuda; this run is for --target llvm")
    assert sorted(os.listdir(db)) == before  # no lock, no provenance rewritten


@pytest.mark.parametrize("args, words", [
    (["--trials", "0"], "--trials must be at least 1"), (["--batch", "0"], "--batch must be at least 1"),
    (["--builders", "0"], "--builders must be at least 1"), (["--time-limit", "nan"], "--time-limit must be"),
    (["--workload", "gemv:64x64"], "tunes GEMM workloads"), (["--compare", "bogus"], "--compare 'bogus' is not"),
    (["--rpc-tracker", "127.0.0.1:1"], "--rpc-tracker needs --rpc-key"),
])
def test_a_refused_tune_leaves_no_directory(tmp_path, capsys, args, words):
    """Each used to create the --db folder and its lock before saying no."""
    db = tmp_path / "db"
    _one_line_error(capsys, ["tune", "--workload", "gemm:32x32x32", "--target", "llvm", "--db", str(db), "--quiet",
                             *args], words)
    assert not db.exists()


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
# builds after the first for a window of seconds, so that an interrupt sent once the first is built lands
# mid-build even on a loaded machine (five were once all built before a Ctrl-C arrived)
RUN_SCHEDULES = ("naive_gemm", "thread_1d_gemm", "thread_2d_gemm", "shared_cache_gemm", "block_tiling_gemm",
                 "register_cache_gemm", "thread_tiling_gemm", "double_buffer_gemm", "warp_tiled_gemm",
                 "async_pipeline_gemm")
RUN = ["-m", "scripts.schedlab", "run", "--workload", "gemm:96x80x40", "--schedules", ",".join(RUN_SCHEDULES),
       "--baselines", "numpy_cpu", "--workers", "1"]
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
    built (no GPU: built, not timed) and its IR files where results.json says they are (paths relative to
    the partial folder)."""
    res = json.loads((partial / "results.json").read_text())
    assert res["meta"]["complete"] is False
    rows = {r["name"]: r for r in res["rows"]}
    first = rows["naive_gemm"]
    assert first["status"] == "no-gpu" and first["registers"] > 0
    for path in first["files"].values():  # relative to the results folder, so it survives the move into OUT
        assert not os.path.isabs(path) and (partial / path).is_file(), path
    assert len(rows) < len(RUN_SCHEDULES)  # cut short: not every kernel was built
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
        # as a terminal's shell starts it: SIGINT handled by default (a test run started in the
        # background of a non-interactive shell inherits SIGINT ignored, and Ctrl-C would do nothing)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
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


def test_ctrl_c_while_the_command_line_is_being_read(monkeypatch, capsys):
    """Building the parser imports TVM (tune's choices), seconds in which Ctrl-C used to end in a
    KeyboardInterrupt traceback."""
    import scripts.schedlab as S

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "make_parser", interrupted)
    try:
        code = S.main(["tune", "--target", "llvm"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped schedlab's main: a traceback")
    assert code == 130
    err = capsys.readouterr().err.strip()
    assert "interrupted" in err and len(err.splitlines()) == 1 and "Traceback" not in err, err


class Terminal:
    """A command under a pseudo-terminal, as in a shell: its own session with the terminal as the
    controlling one, so that Ctrl-C (the byte 0x03 typed into it) reaches the command's whole process
    group (its worker processes too) as SIGINT. Everything the command writes is collected."""

    def __init__(self, cmd):
        import fcntl
        import pty
        import termios
        import threading

        master, slave = pty.openpty()

        def controlling_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdin=slave, stdout=slave, stderr=slave,
                                     preexec_fn=controlling_terminal)
        os.close(slave)
        self.master, self.output = master, bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.master, 4096)
            except OSError:  # the command ended and closed the terminal
                return
            if not data:
                return
            self.output += data

    def ctrl_c(self):
        """Type Ctrl-C; returns (exit code, seconds to exit, what it wrote since)."""
        mark, t0 = len(self.output), time.time()
        os.write(self.master, b"\x03")
        try:
            code = self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        seconds = time.time() - t0
        self.reader.join(5)
        os.close(self.master)
        return code, seconds, self.output[mark:].decode(errors="replace").replace("^C", "")

    def wait_for(self, condition, what, limit=120):
        deadline = time.time() + limit
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(f"the command ended before {what}: {self.output.decode(errors='replace')[-2000:]}")
            if time.time() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
                pytest.fail(f"no {what} within {limit} s")
            time.sleep(0.05)


def _worker_started(proc):
    """A MetaSchedule worker process (the runner's, started before the first build) is up."""
    import psutil

    try:
        return any("tvm.exec.popen_worker" in " ".join(c.cmdline())
                   for c in psutil.Process(proc.pid).children(recursive=True))
    except psutil.Error:
        return False


def _rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def test_ctrl_c_under_a_terminal_while_tuning_then_resume(tmp_path):
    """Ctrl-C typed into a terminal (SIGINT to the tuner and its workers), once while the runner
    starts and once mid-search: each exits 130 within seconds, in one line, without a traceback and
    without a verdict from a check that ran on killed workers (it used to log candidates as failing
    the float64 check, excluded for good); the resume checks the best and finishes the budget."""
    db = tmp_path / "db"
    trials = db / "trials.jsonl"
    cmd = [sys.executable, "-m", "scripts.schedlab", "tune", "--target", "llvm", "--space", "classic",
           "--workload", "gemm:32x32x32", "--trials", "4", "--batch", "2", "--builders", "1", "--db", str(db),
           "--compare", "none", "--quiet"]
    interrupted = "schedlab tune: interrupted; every finished trial is in"
    starting = Terminal(cmd)  # while the runner starts (a ChildProcessError traceback, before)
    starting.wait_for(lambda: _worker_started(starting.proc), "worker process")
    code, seconds, said = starting.ctrl_c()
    assert code == 130 and seconds < 10, (code, seconds, said)
    assert said.strip().startswith(interrupted) and len(said.strip().splitlines()) == 1, said
    assert not _rows(trials)

    searching = Terminal(cmd)  # mid-search: two trials recorded, the next batch being measured
    searching.wait_for(lambda: len(_rows(trials)) >= 2, "two trials")
    code, seconds, said = searching.ctrl_c()
    assert code == 130 and seconds < 10, (code, seconds, said)
    assert said.strip().startswith(interrupted) and len(said.strip().splitlines()) == 1, said
    kept = _rows(trials)
    assert [r["trial"] for r in kept] == [1, 2] and not [r for r in kept if r["status"] == "verify"]

    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _rows(trials)
    assert [r["trial"] for r in rows if r["status"] != "verify"] == [1, 2, 3, 4]
    checks = [r for r in rows if r["status"] == "verify"]
    assert len(checks) == 1 and checks[0]["passed"] and checks[0]["rel_error"] < 1e-5
    assert "rel. error vs float64" in done.stdout


def test_a_pool_whose_worker_is_gone_still_shuts_down_and_frees_its_lock():
    """TVM's process pool kills its workers under its lock: a worker Ctrl-C already ended (its process
    reaped) made the kill raise, the lock stayed held, and the pool's next shutdown (its __del__ at
    garbage collection) waited forever: the tuner hung after Ctrl-C once in three tries."""
    from tvm.support.popen_pool import PopenPoolExecutor

    from tuning.measure import guard_pool_lock

    guard_pool_lock()
    pool = PopenPoolExecutor(max_workers=1)

    class Gone:
        def kill(self):
            raise ChildProcessError("No child processes")

    pool._worker_map[0] = Gone()
    pool.shutdown()
    assert not pool._lock.locked() and pool._shutdown
    pool.shutdown()  # again, as __del__ would: returns
