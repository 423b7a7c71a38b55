"""Plugins: steps of your own, added without editing the package (schedules.plugins, docs/plugins.md).

The example plugin (docs/examples/plugin_wide_tile.py) through every way of loading one and every
command that takes a step; broken plugins as one-line errors that leave the registry as it was;
the numbering that keeps the built-in numbers; a plugin step's search space for the tuner.
In-process loads are undone after each test (the ``isolated`` fixture), so that the other tests
see the built-in registry only."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from schedules import get, plugins, registry
from schedules.errors import PluginError, ScheduleParamError
from schedules.registry import all_schedules, ladder_table_markdown, register
from scripts.schedlab import main
from tests.conftest import HAS_GPU

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "docs", "examples", "plugin_wide_tile.py")
STEP = "wide_warp_tiled_gemm"


@pytest.fixture
def isolated(monkeypatch):
    """Whatever a test loads into this process's registry is gone after it (and the environment
    the loader records it in)."""
    state, loaded, modules = registry.snapshot(), plugins.loaded(), set(sys.modules)
    for name in (plugins.ENV, "PYTHONPATH"):  # set first: undone whether or not they were set before
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.delenv(plugins.ENV)
    yield
    registry.restore(state)
    plugins._LOADED.clear()
    plugins._LOADED.update(loaded)
    for name in set(sys.modules) - modules:
        if name.startswith("schedlab_plugin_"):
            del sys.modules[name]


def _write(folder, name: str, text: str) -> str:
    path = os.path.join(str(folder), name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    return path


def _env(**extra):
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CUDA_PATH": os.environ.get("CUDA_PATH", "/usr/local/cuda")}
    env.pop(plugins.ENV, None)
    env.update(extra)
    return env


def _schedlab(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "scripts.schedlab", *args], cwd=ROOT, env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


# --- the example, in this process ------------------------------------------------------------------
def test_the_example_is_numbered_after_its_anchor_and_built_in_numbers_stay(isolated, capsys):
    table = ladder_table_markdown()
    assert main(["--plugin", EXAMPLE, "list", "--json"]) == 0  # --plugin before the command
    steps = {s["name"]: s for s in json.loads(capsys.readouterr().out)}
    wide = steps[STEP]
    assert (wide["label"], wide["step"], wide["ladder"]) == ("gemm 11.1", 11.1, "gemm")
    assert wide["plugin"] == "plugin_wide_tile.py" and wide["search_space"] == {"stages": [1, 2], "group_m": [1, 8]}
    assert wide["summary"].startswith("Wide warp tiles: warp_tiled_gemm with a 128 × 256 block tile")
    assert (steps["warp_tiled_gemm"]["step"], steps["async_pipeline_gemm"]["step"]) == (11, 12)
    assert all(s["plugin"] is None for n, s in steps.items() if n != STEP)
    names = list(steps)
    assert names.index("warp_tiled_gemm") + 1 == names.index(STEP) == names.index("async_pipeline_gemm") - 1
    assert main(["list", "--plugin", EXAMPLE]) == 0  # after the command; loaded once
    out = capsys.readouterr().out
    assert re.search(r"gemm 11\.1  wide_warp_tiled_gemm +Wide warp tiles.*\(also wide_tile\) \[plugin plugin_wide_tile\.py\]",
                     out)
    assert ladder_table_markdown() == table  # the README's table: the package's steps only
    assert os.environ[plugins.ENV] == EXAMPLE  # recorded for the worker processes


def test_show_diff_and_export_take_the_plugin_step(isolated, capsys, tmp_path):
    assert main(["show", "wide_tile", "--plugin", EXAMPLE, "--shape", "64x64x64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# gemm 11.1 wide_warp_tiled_gemm on gemm:64x64x64: Wide warp tiles")
    assert "block_n=256" in out and 'thread="threadIdx.y"' in out
    # schedlab diff STEP: against the step it follows (the primitives; the command compiles both besides)
    from reports.views.diff import resolve, trace_diff, trace_lines

    a, b, wl = resolve(STEP, None, "256x256x256", {})
    assert (a.spec.name, b.spec.name) == ("warp_tiled_gemm", STEP)
    changed = trace_diff(trace_lines(a.schedule(wl)), trace_lines(b.schedule(wl)))
    assert "~ pad_einsum(block=_, padding=[128, 128, 8])  →  pad_einsum(block=_, padding=[128, 256, 8])" in changed
    assert main(["export", STEP, "--shape", "256x256x256", "--out", str(tmp_path)]) == 0
    launch = json.loads((tmp_path / "launch.json").read_text())
    assert launch["schedule"] == STEP and launch["entry_points"][0]["block"] == [32, 4, 4]
    assert "__global__" in (tmp_path / "kernel.cu").read_text()


def test_the_readme_example_is_a_working_plugin(isolated, tmp_path, capsys):
    """The README's "Adding a step" code, as it is written there, loaded as a plugin."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = re.search(r"```python\n(# my_steps\.py\n.*?)```", text, flags=re.S).group(1)
    path = _write(tmp_path, "my_steps.py", code)
    assert main(["list", "--plugin", path, "--json"]) == 0
    spec = get("v2u")
    assert spec.label == "gemm 3.1" and spec.plugin == "my_steps.py"
    assert get("thread_2d_gemm").step == 3 and get("shared_cache_gemm").step == 4
    capsys.readouterr()
    assert main(["show", "unrolled_2d_gemm", "--shape", "64x64x32"]) == 0
    assert "T.unroll" in capsys.readouterr().out


# --- numbering and placement ------------------------------------------------------------------------
def _step(doc="A step of a test plugin."):
    def fn(wl, cfg):
        return get("warp_tiled_gemm").builder(wl, cfg)

    fn.__doc__ = doc
    return fn


def test_numbering_after_built_in_and_plugin_steps_and_in_a_ladder_of_its_own(isolated):
    config = get("warp_tiled_gemm").config_cls
    register("p_one", "gemm", config, after="warp_tiled_gemm")(_step())
    register("p_two", "gemm", config, after="p_one")(_step())
    register("p_first", "gemm", config, after="warp_tiling")(_step())  # right after the anchor: the others move down
    register("mine_a", "gemm", config, ladder="mine")(_step())
    register("mine_b", "gemv", get("warp_gemv").config_cls, ladder="mine")(_step())
    register("mine_c", "gemm", config, after="mine_a")(_step())
    labels = {s.name: s.label for s in all_schedules(builtin=False)}
    assert labels == {"p_first": "gemm 11.1", "p_one": "gemm 11.2", "p_two": "gemm 11.3",
                      "mine_a": "mine 1", "mine_c": "mine 2", "mine_b": "mine 3"}
    assert get("p_two").step == 11.3 and get("mine_c").step == 2 and get("async_pipeline_gemm").step == 12
    assert registry.ladders() == ["gemm", "gemv", "mine"]
    assert [s.name for s in all_schedules()][-3:] == ["mine_a", "mine_c", "mine_b"]
    from reports.views.diff import previous_step

    assert previous_step("p_one").name == "p_first" and previous_step("async_pipeline_gemm").name == "warp_tiled_gemm"
    assert previous_step("mine_c").name == "mine_a"
    for n in range(6):
        register(f"p_more_{n}", "gemm", config, after="p_two")(_step())
    with pytest.raises(ScheduleParamError, match="more than 9 plugin steps after one step of the gemm ladder"):
        register("p_tenth", "gemm", config, after="warp_tiled_gemm")(_step())
    with pytest.raises(ScheduleParamError, match="the gemm ladder is built in"):
        register("p_bad", "gemm", config, ladder="gemm")(_step())
    with pytest.raises(ScheduleParamError, match="anchor 'warp_gemv' is not a step of the gemm ladder"):
        register("p_bad", "gemm", config, after="warp_gemv")(_step())
    assert "p_tenth" not in {s.name for s in all_schedules()}  # a refused step leaves nothing behind


def test_the_results_tables_keep_a_plugins_ladder_after_the_built_in_one():
    import pandas as pd

    from reports.engine.results import derive
    from reports.views.tables import ordered

    rows = [{"workload": "gemm:64x64x64", "name": n, "role": "schedule", "step": s, "ladder": label, "status": "ok",
             "time_ms": t} for n, s, label, t in (("mine_a", 1, "mine 1", 1.0), ("naive_gemm", 1, "gemm 1", 8.0),
                                                  ("wide", 11.1, "gemm 11.1", 2.0), ("warp_tiled_gemm", 11, "gemm 11", 4.0))]
    rows.append({"workload": "gemm:64x64x64", "name": "cublas", "role": "baseline", "status": "ok", "time_ms": 1.0})
    df = derive(pd.DataFrame(rows))
    assert list(ordered(df)["name"]) == ["naive_gemm", "warp_tiled_gemm", "wide", "mine_a", "cublas"]
    assert df.set_index("name").loc["wide", "speedup_vs_prev"] == 2.0  # after warp_tiled_gemm, before mine_a


# --- broken plugins --------------------------------------------------------------------------------
GOOD_THEN = """\
    from schedules.gemm_fast import WarpTileConfig, fast_tiled
    from schedules.registry import register

    @register("good_first_gemm", "gemm", WarpTileConfig, after="naive_gemm")
    def good(wl, cfg):
        '''Registered, then undone: the plugin fails after it.'''
        return fast_tiled(wl, cfg)

"""

BROKEN = {
    "an_import.py": ("import foo_not_there\n", "ModuleNotFoundError: No module named 'foo_not_there'"),
    "a_clash.py": (GOOD_THEN + """\
    @register("warp_tiled_gemm", "gemm", WarpTileConfig, after="naive_gemm")
    def again(wl, cfg):
        '''A built-in name.'''
    """, "step 'warp_tiled_gemm' already registered"),
    "an_anchor.py": (GOOD_THEN + """\
    @register("my_gemm", "gemm", WarpTileConfig, after="nope")
    def mine(wl, cfg):
        '''Nowhere.'''
    """, "anchor 'nope' is not a step of the gemm ladder"),
    "no_docstring.py": (GOOD_THEN + """\
    @register("my_gemm", "gemm", WarpTileConfig, after="naive_gemm")
    def mine(wl, cfg):
        return fast_tiled(wl, cfg)
    """, "step 'my_gemm': its builder has no docstring (its first paragraph is the step's summary)"),
    "not_a_dataclass.py": ("""\
    from schedules.registry import register
    from schedules.step_config import StepConfig

    class Loose(StepConfig):  # no @dataclass(frozen=True): tile would not be a parameter
        tile: int = 4

    @register("loose_gemm", "gemm", Loose, ladder="mine")
    def loose(wl, cfg):
        '''A configuration that is not a dataclass of its own.'''
    """, "step 'loose_gemm': its configuration Loose is not a frozen dataclass deriving from StepConfig "
         "(@dataclass(frozen=True) class ...(StepConfig))"),
    "a_syntax_error.py": ("def (:\n", "SyntaxError: invalid syntax (line 1)"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_plugin_is_one_line_naming_it_and_leaves_the_registry_as_it_was(isolated, tmp_path, capsys, name):
    text, cause = BROKEN[name]
    path = _write(tmp_path, name, text)
    before = [s.name for s in all_schedules()]
    assert main(["list", "--plugin", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [f"schedlab: error: plugin {name}: {cause}"]
    assert [s.name for s in all_schedules()] == before
    assert plugins.loaded() == {} and plugins.ENV not in os.environ


def test_a_missing_file_and_a_builder_that_raises(isolated, tmp_path, capsys):
    assert main(["--plugin", str(tmp_path / "gone.py"), "list"]) == 2
    assert capsys.readouterr().err == f"schedlab: error: plugin gone.py: no such file ({tmp_path / 'gone.py'})\n"
    path = _write(tmp_path, "raises.py", """\
        from schedules.gemm_fast import WarpTileConfig
        from schedules.registry import register
        from schedules.errors import ScheduleParamError

        @register("raising_gemm", "gemm", WarpTileConfig, ladder="mine")
        def raising(wl, cfg):
            '''Raises.'''
            if wl.M == 128:
                raise ScheduleParamError("raising_gemm: M must not be 128")  # its own error: unchanged
            return 1 / 0
        """)
    assert main(["show", "raising_gemm", "--plugin", path, "--shape", "64x64x64"]) == 2
    assert capsys.readouterr().err == ("schedlab: error: plugin raises.py: step raising_gemm: the builder raised "
                                       "ZeroDivisionError: division by zero\n")
    assert main(["show", "raising_gemm", "--shape", "128x64x64"]) == 2
    assert capsys.readouterr().err == "schedlab: error: raising_gemm: M must not be 128\n"


def test_the_option_is_on_every_command():
    from scripts.schedlab import make_parser

    parser = make_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"list", "show", "diff", "run", "export", "report", "tune"} <= set(commands)
    for name, sub in commands.items():
        assert "--plugin" in sub._option_string_actions, name
    args = parser.parse_args(["--plugin", "a.py", "diff", "x", "--plugin", "b.py", "--plugin", "c.py"])
    assert (args.plugin_before, args.plugin) == (["a.py"], ["b.py", "c.py"])


# --- SCHEDLAB_PLUGINS, and schedlab run's workers -------------------------------------------------------
def test_schedlab_plugins_names_files_and_modules(isolated, monkeypatch, tmp_path, capsys):
    """Files (a relative path, recorded absolute for the workers) and module names, os.pathsep apart;
    a module's folder goes onto PYTHONPATH. (A fresh process loading them, and an installed entry
    point, on its registry's first use: test_step_protocol.)"""
    _write(tmp_path, "own_module_steps.py", """\
        from schedules.gemm_fast import WarpTileConfig, fast_tiled
        from schedules.registry import register

        @register("own_module_gemm", "gemm", WarpTileConfig, ladder="own")
        def own(wl, cfg):
            '''A step of a module named in SCHEDLAB_PLUGINS.'''
            return fast_tiled(wl, cfg)
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(plugins.ENV, os.pathsep.join([os.path.relpath(EXAMPLE, ROOT), "own_module_steps"]))
    assert main(["list", "--json"]) == 0
    steps = {s["name"]: s for s in json.loads(capsys.readouterr().out)}
    assert steps[STEP]["label"] == "gemm 11.1" and steps["own_module_gemm"]["label"] == "own 1"
    assert steps["own_module_gemm"]["plugin"] == "own_module_steps"
    assert os.environ[plugins.ENV] == os.pathsep.join([EXAMPLE, "own_module_steps"])
    assert str(tmp_path) in os.environ["PYTHONPATH"].split(os.pathsep)
    sys.modules.pop("own_module_steps", None)


def test_schedlab_run_builds_plugin_steps_in_its_workers(isolated, tmp_path):
    """A run (``schedlab run``'s job, from Python) of plugin steps: the build workers load the
    plugins this process loaded; a builder that raises is its row's error, naming the plugin and
    the step, and the run goes on; the tables and the report page list the plugin's step."""
    from reports import load_results, run

    raises = _write(tmp_path, "raises.py", """\
        from schedules.gemm_fast import WarpTileConfig
        from schedules.registry import register

        @register("raising_gemm", "gemm", WarpTileConfig, ladder="mine")
        def raising(wl, cfg):
            '''Raises.'''
            return 1 / 0
        """)
    plugins.load(EXAMPLE, raises)
    out = tmp_path / "run"
    run(["gemm:64x64x64"], ["raising_gemm", STEP], baselines=[], out_dir=str(out), progress=False, workers=1)
    df = load_results(str(out)).set_index("name")
    assert df.loc[STEP, "status"] == ("ok" if HAS_GPU else "no-gpu") and df.loc[STEP, "ladder"] == "gemm 11.1"
    assert df.loc[STEP, "step"] == 11.1 and df.loc[STEP, "threads_per_block"] == 512 and df.loc[STEP, "registers"] > 0
    assert df.loc["raising_gemm", "status"] == "error" and df.loc["raising_gemm", "ladder"] == "mine 1"
    assert df.loc["raising_gemm", "error"] == ("plugin raises.py: step raising_gemm: the builder raised "
                                               "ZeroDivisionError: division by zero")
    table = (out / "table.md").read_text()
    assert table.index(f"`{STEP}`") < table.index("`raising_gemm`")  # the gemm ladder, then the plugin's own
    page = (out / "report.html").read_text()
    assert "gemm 11.1" in page and "Wide warp tiles: warp_tiled_gemm with a 128 × 256 block tile" in page


# --- tuning a plugin step ----------------------------------------------------------------------------
def test_a_plugin_step_with_a_search_space_is_a_tuning_space(isolated, capsys, tmp_path):
    """One design space per configuration the workload takes (defaults first), each the step's
    own schedule; a step without a search space is no space, in one line."""
    import tvm
    from tvm import s_tir

    from schedules import parse_workload
    from tuning.spaces import CONFIG_KEY, get_space, knob_values, step_configs
    from tuning.tuner import candidate_from_decisions

    plugins.load(EXAMPLE)
    spec, wl = get(STEP), parse_workload("gemm:512x512x256")
    space = get_space(STEP)
    assert space.strategy == "exhaustive" and "stages in {1, 2}, group_m in {1, 8}" in space.description
    cfgs = step_configs(spec, wl)
    assert cfgs[0] == spec.config() and [(c.stages, c.group_m) for c in cfgs] == [(2, 1), (1, 1), (1, 8), (2, 8)]
    mod = tvm.IRModule({"main": wl.prim_func()})
    designs = space.template(s_tir.Schedule(mod))
    assert len(designs) == 4
    cand, trace, failed = candidate_from_decisions(mod, [], designs[2].trace, [], [])
    assert failed is None and knob_values(trace) == {"stages": "1", "group_m": "8"}
    sch = cand.sch.copy()
    sch.unannotate(sch.get_sblock("root"), CONFIG_KEY)
    tvm.ir.assert_structural_equal(sch.mod, spec.builder(wl, cfgs[2]).mod)
    with pytest.raises(ValueError, match=f"unknown space 'naive_gemm' \\(known: classic, .*{STEP}"):
        get_space("naive_gemm")
    assert main(["tune", "--space", "nope", "--db", str(tmp_path), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("schedlab: error: unknown space 'nope'")


@pytest.mark.gpu
def test_tune_a_plugin_step_on_the_gpu(tmp_path):
    proc = _schedlab("tune", "--plugin", EXAMPLE, "--space", STEP, "--workload", "gemm:1024x1024x1024", "--trials", "4",
                     "--compare", "none", "--db", str(tmp_path), "--quiet", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{STEP}/exhaustive on gemm:1024x1024x1024: 4 trials" in proc.stdout
    best = json.loads(next(tmp_path.glob("best_*.json")).read_text())
    assert best["space"] == STEP and set(best["knobs"]) >= {"stages", "group_m"}


def test_the_cli_names_the_plugin_sources_as_the_loader_does():
    """The CLI decides whether any plugin is named without importing the loader (no TVM):
    it must look where the loader looks."""
    from schedules import plugins
    from scripts import steps_index

    assert (steps_index.PLUGINS_ENV, steps_index.PLUGINS_GROUP) == (plugins.ENV, plugins.GROUP)
