"""The lab installed like a library: a wheel built from this checkout, installed in a fresh virtual
environment and run from another directory writes its results, its published copy and its IR
under the working directory (or where it is told), looks for tuning records there, reads a user's
calibration, and leaves every file of the installed environment as it was.

The environment is made without pip or network: ``venv --without-pip``, the wheel installed by this
interpreter's pip (``--python``), and the dependencies (TVM, NumPy...) seen through a ``.pth`` line
naming this interpreter's site-packages (plain path lines: the ``.pth`` files there, an editable
install of this checkout among them, are not run, so the wheel's copy is the one imported).
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import os
import shutil
import site
import subprocess
import sys

import pytest

from tests.conftest import HAS_GPU
from tests.helpers import documented_columns

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("schedules", "tuning", "reports", "scripts")


def _sources(dst: str):
    """The files the wheel is built from, copied (a build in the checkout would leave build/ and
    *.egg-info there): pyproject.toml, README.md and the packages, without the committed results."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), dst)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in PACKAGES:
        shutil.copytree(os.path.join(ROOT, pkg), os.path.join(dst, pkg),
                        ignore=lambda d, names: [*skip(d, names), *(["results"] if d.endswith(os.sep + "reports") else [])])


def _tree(path: str) -> dict:
    """Every file under ``path`` with its content's hash."""
    out = {}
    for d, _, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, path)] = hashlib.sha1(fh.read()).hexdigest()
    return out


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, f"{cmd[:3]}...: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def _has_bdist_wheel() -> bool:
    """setuptools builds wheels itself from 70.1; before, only with the ``wheel`` package."""
    import setuptools

    major_minor = tuple(int(p) for p in setuptools.__version__.split(".")[:2] if p.isdigit())
    return major_minor >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(schedlab, python, site-packages, env)`` of a fresh environment with the wheel installed."""
    if importlib.util.find_spec("setuptools") is None or not _has_bdist_wheel():
        pytest.skip("building the wheel offline needs setuptools with bdist_wheel in this environment "
                    "(pip install 'setuptools>=70.1', or setuptools and wheel)")
    tmp = tmp_path_factory.mktemp("install")
    src, wheels, venv = tmp / "src", tmp / "wheels", tmp / "venv"
    src.mkdir()
    _sources(str(src))
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(wheels), str(src)])
    (wheel,) = wheels.iterdir()
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = str(venv / "bin" / "python")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", str(wheel)])
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    ours = [p for p in [*site.getsitepackages(), site.getusersitepackages()]
            if os.path.isdir(p) and os.path.realpath(p) != os.path.realpath(ROOT)]
    with open(os.path.join(purelib, "schedlab-test-dependencies.pth"), "w") as f:
        f.write("\n".join(ours) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SCHEDLAB_TUNED", "SCHEDLAB_CALIBRATION",
                                                            "SCHEDLAB_COMMIT", "VIRTUAL_ENV")}
    where = _run([python, "-c", "from importlib.util import find_spec as f; print(f('schedules').origin, "
                  "f('scripts.schedlab').origin)"], cwd=str(tmp), env=env).stdout.split()  # found, not imported
    assert all(p.startswith(purelib + os.sep) for p in where), where  # the wheel's copy runs, not the checkout
    return str(venv / "bin" / "schedlab"), python, purelib, env


def test_an_installed_lab_writes_only_where_it_is_told(installed, tmp_path):
    """``schedlab run`` of the installed lab from another directory: its results, IR and published
    copy land under the working directory, the tuned step looks for its record there, the user's
    calibration is read, and nothing in the installed environment changes. Without a GPU it builds
    everything and invents nothing: no time, no cuBLAS row."""
    import tomllib

    schedlab, _, purelib, env = installed
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert _run([schedlab, "--version"], cwd=str(tmp_path), env=env).stdout.startswith(f"schedlab {version} (apache-tvm ")
    before = _tree(os.path.dirname(os.path.dirname(purelib)))  # lib/: site-packages and all beside it
    # a user's calibration: the packaged one with another source
    from schedules.calibration import calibration_path, load_calibration

    (tmp_path / "cal.json").write_text(json.dumps(dict(load_calibration(calibration_path()), source="my own fit")))
    proc = _run([schedlab, "run", "--workload", "gemm:96x80x40", "--workload", "gemv:33x17", "--schedules",
                 "shared_cache_gemm,thread_tiling_gemm,warp_gemv,tuned_gemm", "--baselines", "numpy_cpu,cublas",
                 "--quiet", "--no-report", "--json", "--publish", "mine"], cwd=str(tmp_path),
                env={**env, "SCHEDLAB_CALIBRATION": "cal.json"})
    summary = json.loads(proc.stdout)
    rows = {(r["workload"], r["name"]): r for r in summary["rows"]}
    assert summary["complete"] is True and summary["out_dir"] == os.path.join("out", "run") and summary["report"] is None
    assert summary["provenance"]["commit"] == f"tvm-schedlab {version} (installed)"
    # the dispatcher's constants came from the user's file (provenance reads the loaded calibration)
    assert summary["provenance"]["calibration"] == "cal.json: my own fit"
    # tuned_gemm looked for its record in out/tune under the working directory, not in the package
    tuned = rows[("gemm:96x80x40", "tuned_gemm")]
    assert tuned["status"] == "error" and "at out/tune/best_gemm_96x80x40.json" in tuned["error"]
    # the run's files, the IR its build workers wrote and the published copy: under the working directory
    out = tmp_path / "out" / "run"
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["complete"] is True and len(res["rows"]) == len(rows)
    assert summary["published"].startswith(os.path.join("reports", "results") + os.sep)
    published = json.loads((tmp_path / summary["published"] / "results.json").read_text())
    assert {(r["workload"], r["name"]) for r in published["rows"]} == set(rows)
    files = {(r["workload"], r["name"]): r.get("files") for r in res["rows"]}
    for key in [("gemm:96x80x40", "shared_cache_gemm"), ("gemm:96x80x40", "thread_tiling_gemm"),
                ("gemv:33x17", "warp_gemv")]:
        r = rows[key]
        assert r["registers"] > 0 and r["spill_bytes"] == 0
        for stage in ("scheduled", "lowered", "cuda", "ptx", "ptxas"):
            assert not os.path.isabs(files[key][stage]) and (out / files[key][stage]).stat().st_size > 0  # relative to the folder
        if not HAS_GPU:
            assert r["status"] == "no-gpu" and r["time_ms"] is None and r["tflops"] is None
    assert rows[("gemm:96x80x40", "shared_cache_gemm")]["step"] == "gemm 4"
    assert rows[("gemm:96x80x40", "numpy_cpu")]["status"] == "ok" and rows[("gemm:96x80x40", "numpy_cpu")]["rel_error"] < 1e-5
    if not HAS_GPU:
        assert ("gemm:96x80x40", "cublas") not in rows  # no GPU: no cuBLAS row rather than an invented one
        table = (out / "table.md").read_text()
        assert "no GPU" in table and "shared_cache_gemm" in table and "| gemm 4 " in table
    undocumented = {k for r in res["rows"] for k in r} - documented_columns()
    assert not undocumented, f"columns missing from docs/results-columns.md: {sorted(undocumented)}"
    with open(out / "results.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(res["rows"])
    assert _tree(os.path.dirname(os.path.dirname(purelib))) == before  # nothing written in the installed tree
