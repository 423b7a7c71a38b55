"""The project's shape, checked from its source with ``ast`` (nothing is imported):

* no import circle among the modules of schedules, tuning, reports and scripts (imports inside
  functions included: a circle hidden behind a late import is still a circle);
* the layers point one way: schedules ← tuning ← reports ← scripts, and inside reports
  engine ← views ← experiments (the engine imports neither views nor experiments; views import the
  engine only; experiments import the engine and views);
* no project file over 800 lines; nothing imports ``tuning.tuned``;
* an import inside a function only of a heavy or optional dependency (:data:`LAZY_ALLOWED`), or
  where :data:`LAZY_EXCEPTIONS` says why;

and the command line's manners: a reader that leaves early (``schedlab list | head -1``) ends the
command quietly, and a subcommand's --help lists its own options.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("schedules", "tuning", "reports", "scripts")
LAYERS = {"schedules": 0, "tuning": 1, "reports": 2, "scripts": 3}
REPORT_ROLES = {"engine": 0, "views": 1, "experiments": 2}  # inside reports: a role imports its own or lower ones
MAX_LINES = 800

# Imports that may sit inside a function: heavy or optional third-party modules (by their first
# component). torch, xgboost, ml_dtypes, pygments, playwright, tornado and triton are optional (the
# code says "unavailable" or goes without); tvm/tvm_ffi and matplotlib are heavy, imported late where
# a light module or a fast command path must not pay for them.
LAZY_ALLOWED = {"torch", "triton", "xgboost", "ml_dtypes", "pygments", "playwright", "tornado", "tvm", "tvm_ffi",
                "matplotlib"}
# Files that may import more inside functions, and why.
LAZY_EXCEPTIONS = {
    # the command line: a command's module (TVM, pandas...) is imported by the command that runs it,
    # so that `schedlab --help` and argument errors stay fast; the same for the helper scripts
    "scripts/": {"schedules", "tuning", "reports"},
    # the public API's two functions load the engine and the experiments when called: `import
    # reports.engine.isolate` in a worker process must not pay for pandas and matplotlib
    "reports/__init__.py": {"reports"},
    # a worker process moves to the caller's directory before it imports the lab (whose import reads
    # SCHEDLAB_CALIBRATION, a path that may be relative to the caller)
    "reports/engine/isolate.py": {"schedules", "reports"},
    # functions that MetaSchedule's worker processes run import what they need themselves (see
    # the module's docstring)
    "tuning/measure.py": {"schedules", "tuning", "os"},
    # the GPU profiles are looked up only where $SCHEDLAB_GPU names one: the tuner's build
    # processes import the compiler module and must not pay for importing every step
    "tuning/cuda_compile.py": {"schedules"},
}


def _modules() -> dict[str, str]:
    """module name -> file, for every .py file of the packages."""
    out = {}
    for pkg in PACKAGES:
        for dirpath, dirnames, files in os.walk(os.path.join(ROOT, pkg)):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                    name = rel[:-3].replace(os.sep, ".")
                    out[name.removesuffix(".__init__")] = rel
    return out


MODULES = _modules()


def _imports(name: str, path: str):
    """(imported project module or None, the import's absolute name, inside a function?, line) of
    every import statement in the file."""
    tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read(), path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    in_function = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    in_function.add(id(inner))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            # `from pkg import submodule` imports the submodule
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            parts = target.split(".")
            project = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in MODULES),
                           None)
            yield project, target, id(node) in in_function, node.lineno


EDGES = {name: list(_imports(name, path)) for name, path in MODULES.items()}


def test_no_import_circle():
    graph = {m: sorted({t for t, _, _, _ in EDGES[m] if t and t != m}) for m in MODULES}
    # a package's own __init__ that imports its submodules (to register them) is not a circle with a
    # submodule that imports a sibling: only edges between modules count, not the implicit parent import
    state, stack, circles = {}, [], []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in graph[m]:
            if state.get(n) == 1:
                circles.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def _layer(module: str):
    parts = module.split(".")
    role = REPORT_ROLES.get(parts[1]) if parts[0] == "reports" and len(parts) > 1 else None
    return LAYERS[parts[0]], role


def test_layers_point_one_way():
    wrong = []
    for m, edges in EDGES.items():
        layer, role = _layer(m)
        for target, _, _, line in edges:
            if not target:
                continue
            t_layer, t_role = _layer(target)
            if t_layer > layer:
                wrong.append(f"{MODULES[m]}:{line} imports {target} (a higher layer)")
            elif t_layer == layer == LAYERS["reports"] and role is not None and t_role is not None and t_role > role:
                wrong.append(f"{MODULES[m]}:{line} imports {target} (reports: engine <- views <- experiments)")
            elif t_layer == layer == LAYERS["reports"] and role is not None and t_role is None and target == "reports":
                wrong.append(f"{MODULES[m]}:{line} imports the reports package's API from inside it")
    assert not wrong, "\n".join(wrong)


def test_report_roles_are_packages():
    for role in REPORT_ROLES:
        assert f"reports.{role}" in MODULES
    flat = [m for m in MODULES if m.startswith("reports.") and m.count(".") == 1 and m.split(".")[1] not in REPORT_ROLES]
    assert not flat, f"modules of reports outside engine/views/experiments: {flat}"


def test_no_file_over_800_lines():
    too_long = {}
    tests = [os.path.join("tests", f) for f in os.listdir(os.path.join(ROOT, "tests")) if f.endswith(".py")]
    for path in [*MODULES.values(), *tests]:
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            too_long[path] = n
    assert not too_long, too_long


def test_nothing_imports_tuning_tuned():
    files = dict(MODULES)
    for f in os.listdir(os.path.join(ROOT, "tests")):
        if f.endswith(".py"):
            files[f"tests.{f[:-3]}"] = os.path.join("tests", f)
    offenders = [f"{path}:{line}" for name, path in files.items()
                 for _, target, _, line in _imports(name, path) if target == "tuning.tuned"
                 or target.startswith("tuning.tuned.")]
    assert not offenders, offenders


def _lazy_allowed(path: str, target: str) -> bool:
    first = target.split(".")[0]
    if first in LAZY_ALLOWED:
        return True
    return any(path.startswith(prefix) and first in allowed for prefix, allowed in LAZY_EXCEPTIONS.items())


def test_imports_inside_functions_only_of_heavy_or_optional_modules():
    wrong = [f"{MODULES[m]}:{line}: {target}" for m, edges in EDGES.items()
             for _, target, lazy, line in edges if lazy and not _lazy_allowed(MODULES[m], target)]
    assert not wrong, "imports inside functions that belong at the module's top:\n" + "\n".join(wrong)


def _schedlab(*args, **kw):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([sys.executable, "-m", "scripts.schedlab", *args], cwd=ROOT, env=env, **kw)


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    """``schedlab list | head -1``: the pipe is closed before the command writes; it exits 0 and
    says nothing on stderr (no BrokenPipeError traceback)."""
    proc = _schedlab("list", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0
    assert err == b""


def test_a_reader_that_takes_one_line_ends_the_command_quietly():
    proc = _schedlab("list", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert first.strip() == b"GEMM ladder"
    assert proc.wait(timeout=300) == 0 and err == b""


@pytest.mark.parametrize("command, options", [
    ("bench-gemm", ("--out", "--workers", "--budget", "--timeout", "--quiet", "--shapes", "--precisions", "--steps",
                    "--random", "--layouts", "--seed")),
    ("bench-gemv", ("--out", "--workers", "--budget", "--timeout", "--quiet", "--workload", "--extra", "--sweep")),
    ("sweep", ("--out", "--set", "--shapes", "--part", "--where")),
    ("calibrate", ("DIR", "--write", "--report")),
    ("tune", ("--workload", "--space", "--trials", "--db", "--report-only", "--reselect")),
])
def test_every_subcommand_help_lists_its_options(command, options, capsys):
    from scripts.schedlab import main

    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: schedlab {command}")
    for option in options:
        assert option in out, option


def test_help_texts_are_whole_sentences(capsys):
    from scripts.schedlab import DESCRIPTION, main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert " ".join(DESCRIPTION.split()) in out and DESCRIPTION.endswith(".")
    for line in ("List the GEMM and GEMV ladders: every step, its number and what it changes.",
                 "Fit the dispatcher's model to a calibration sweep."):
        assert line in out


def test_help_list_and_argument_errors_load_no_tvm():
    """``schedlab --help``, ``list`` and a refused argument answer without importing TVM (which
    imports torch: 3.5-4 s before anything is printed), pandas or NumPy."""
    code = ("import sys\n"
            "from scripts.schedlab import main\n"
            "for argv in (['--help'], ['tune', '--help'], ['list'], ['list', '--json', '--kind', 'gemv'],\n"
            "             ['run', '--workers', 'x'], ['tune', '--space', 'nope'], ['nope']):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print(sorted(m for m in ('tvm', 'tvm_ffi', 'torch', 'pandas', 'numpy') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GEMM ladder" in done.stdout and "invalid choice: 'nope'" in done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_the_report_page_static_files_are_package_data():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["reports.views"]
    for name in ("report.css", "report.js"):
        assert os.path.isfile(os.path.join(ROOT, "reports", "views", "static", name))
        assert any(name.endswith(pattern.rpartition("*")[2]) for pattern in data)


def test_version_names_the_lab_and_the_tvm_it_is_pinned_to():
    proc = _schedlab("--version", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.startswith("schedlab ") and "apache-tvm 0.27.0.post1" in out and "apache-tvm-ffi 0.1.14.post1" in out


def test_list_as_json_is_the_registry():
    import json

    from schedules import all_schedules
    from scripts.steps_index import registry_steps

    proc = _schedlab("list", "--json", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    steps = json.loads(out)
    assert [(s["label"], s["name"]) for s in steps] == [(s.label, s.name) for s in all_schedules()]
    assert steps == registry_steps()  # every field, as the registry has it
    best = next(s for s in steps if s["name"] == "best_fp16_gemm")
    assert best["dtypes"] == ["float16", "bfloat16"] and best["batched"] and "nt" in best["layouts"]
    assert best["archs"] == [] and next(s for s in steps if s["name"] == "wgmma_gemm")["archs"] == ["sm_90a"]
