"""The contract every step keeps: one configuration base that declares the optional capabilities,
every step registered by importing the registry alone, and a ``best_*`` step's choice made once
per build."""

import dataclasses
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from schedules import all_schedules, dispatch, get, parse_workload
from schedules.registry import check_step
from schedules.step_config import StepConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)  # the project, then TVM where it was
    return {**os.environ, "PYTHONPATH": path, "CUDA_PATH": os.environ.get("CUDA_PATH", "/usr/local/cuda")}


def test_every_step_configuration_derives_from_the_one_base():
    for spec in all_schedules():
        assert issubclass(spec.config_cls, StepConfig), spec.name
        assert dataclasses.is_dataclass(spec.config_cls) and spec.config_cls.__dataclass_params__.frozen, spec.name


def test_every_step_keeps_the_contract_a_plugins_step_is_held_to():
    """The checks a plugin's step must pass to be registered (schedules.registry.check_step), passed
    by every built-in step; and they do refuse (tests/test_plugins.py: a plugin that breaks them)."""
    for spec in all_schedules():
        check_step(spec)
    @dataclasses.dataclass(frozen=True)
    class NoLaunch(StepConfig):
        tile: int = 4

    spec = get("warp_tiled_gemm")
    for broken, message in ((dataclasses.replace(spec, builder=lambda wl, cfg: None), "has no docstring"),
                            (dataclasses.replace(spec, name="Warp-Tiled"), "not lower-case letters"),
                            (dataclasses.replace(spec, config_cls=object), "not a frozen dataclass"),
                            (dataclasses.replace(spec, config_cls=NoLaunch), "does not say how it launches")):
        with pytest.raises(ValueError, match=message):
            check_step(broken)


def test_the_base_declares_each_capability_with_its_default():
    """What the registry, the engine and the CLI read of a configuration is declared on the base,
    with a default, so that a step that says nothing gets the documented behaviour."""
    base = StepConfig()
    assert base.dtypes == ("float32", "float16") and base.layouts == ("nn",) and base.batched is False
    assert base.tolerance == 0.0 and base.zero_means_auto == () and base.async_copy is False
    assert base.pass_config == {} and base.check(None) is None and base.also_takes(None) is False
    assert base.search_space == {}
    assert base.choose(None) is None and base.explain(None) is None and base.explanation(None) is None
    assert base.archs == () and base.min_arch == "" and base.arch_refusal("sm_75") is None
    assert base.scope_refusal(None) is None
    with pytest.raises(NotImplementedError):
        base.launch(None)
    assert dataclasses.fields(base) == ()  # capabilities are not parameters


def test_a_step_says_which_architectures_it_builds_for():
    """``archs``: exactly those (the Hopper steps: sm_90a, which Blackwell is not); ``min_arch`` and
    a cp.async configuration: from that one on. The refusal is one line naming what is needed."""
    wgmma = get("wgmma_gemm").config()
    assert wgmma.arch_refusal("sm_90") is None and wgmma.arch_refusal("sm_90a") is None
    for arch in ("sm_80", "sm_89", "sm_100", "sm_120"):
        assert wgmma.arch_refusal(arch) == f"needs sm_90a (wgmma), not {arch}"
    ring = get("async_pipeline_gemm").config()
    assert ring.async_copy and ring.arch_refusal("sm_80") is None and ring.arch_refusal("sm_120") is None
    assert ring.arch_refusal("sm_75") == "needs sm_80 or newer (cp.async), not sm_75"
    assert get("tensor_core_gemm").config(async_copy=False, intrinsics="mma").arch_refusal("sm_75") == \
        "needs sm_80 or newer (mma.sync m16n8k16), not sm_75"
    assert get("tensor_core_gemm").config(async_copy=False).arch_refusal("sm_75") is None  # WMMA: sm_70 on


def test_a_parameter_named_like_a_capability_keeps_its_place_among_the_fields():
    """``async_copy`` is a capability (False) and, on the SIMT steps, a parameter: the parameter's
    place in the configuration (its repr, the results' params) is where the step declares it."""
    names = [f.name for f in dataclasses.fields(get("warp_tiled_gemm").config_cls)]
    assert names.index("async_copy") == names.index("stages") + 1


OWN_LADDER = '''\
from schedules.gemm_fast import WarpTileConfig, fast_tiled
from schedules.registry import register


@register("own_first_gemm", "gemm", WarpTileConfig, ladder="own")
def first(wl, cfg):
    """The first step of a ladder of its own."""
    return fast_tiled(wl, cfg)


@register("own_second_gemm", "gemm", WarpTileConfig, ladder="own")
def second(wl, cfg):
    """The second."""
    return fast_tiled(wl, cfg)
'''


def test_importing_the_registry_registers_every_step_and_the_environments_plugins(tmp_path):
    """A fresh process that imports only the registry knows tuned_gemm (it used to be registered by
    importing tuning.tuned, and a path that forgot died with "unknown schedule 'tuned_gemm'"), and,
    on its first look-up, the plugins of SCHEDLAB_PLUGINS (a relative path) and of an installed
    package's entry point (a dist-info folder on the path, as pip leaves it), whose ladder of its
    own follows the built-in ones: what the worker processes of the engine and the tuner rely on."""
    dist = tmp_path / "own_steps-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: own-steps\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[schedlab.plugins]\nown = own_ladder_steps\n")
    (tmp_path / "own_ladder_steps.py").write_text(OWN_LADDER)
    code = ("import json; from schedules import get, all_schedules; get('tuned_gemm'); get('tuned');"
            "print(json.dumps([(s.label, s.name, s.plugin) for s in all_schedules()]))")
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    env["SCHEDLAB_PLUGINS"] = os.path.join("docs", "examples", "plugin_wide_tile.py")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    steps = [tuple(s) for s in json.loads(proc.stdout)]
    assert [s for s in steps if not s[2]] == [(s.label, s.name, "") for s in all_schedules(builtin=True)]
    assert [s for s in steps if s[2]] == [("gemm 11.1", "wide_warp_tiled_gemm", "plugin_wide_tile.py"),
                                           ("own 1", "own_first_gemm", "own (own_ladder_steps)"),
                                           ("own 2", "own_second_gemm", "own (own_ladder_steps)")]
    assert steps[-2:] == [s for s in steps if s[0].startswith("own")]


@pytest.mark.parametrize("name, workload", [("best_gemm", "gemm:1000x500x2001"),
                                            ("best_fp16_gemm", "gemm:1024x512x2048:float16"),
                                            ("best_tf32_gemm", "gemm:3000x1000x2500")])
def test_a_best_step_is_resolved_once_per_build(monkeypatch, name, workload):
    """Validating, building and describing a best_* step ask the dispatcher's model once: the
    resolved step and configuration are carried on (they were asked for five times a build)."""
    calls = []
    rank = dispatch.rank

    def counted(*args, **kwargs):
        calls.append(args)
        return rank(*args, **kwargs)

    monkeypatch.setattr(dispatch, "rank", counted)
    spec, wl = get(name), parse_workload(workload)
    resolved = spec.resolve(wl)
    spec.validate(wl, resolved.config, resolved=resolved)
    sch = resolved.schedule(wl)
    assert len(calls) == 1
    assert resolved.step.name != name and resolved.chosen.startswith(resolved.step.name)
    assert sch.mod.script() == get(resolved.step.name).builder(wl, resolved.step_config).mod.script()


def test_a_plain_step_resolves_to_itself():
    spec, wl = get("warp_tiled_gemm"), parse_workload("gemm:256x256x256")
    resolved = spec.resolve(wl)
    assert resolved.step is spec and resolved.step_config == spec.config() and resolved.chosen is None


@pytest.mark.gpu
def test_tune_then_report_with_the_hand_schedules(tmp_path):
    """``schedlab tune ... --report --hand`` in a fresh process: tunes, then times tuned_gemm beside
    the hand schedules in the harness (it died after tuning with "unknown schedule 'tuned_gemm'")."""
    db = tmp_path / "db"
    proc = subprocess.run([sys.executable, "-m", "scripts.schedlab", "tune", "--workload", "gemm:256x256x512",
                           "--space", "fast", "--trials", "8", "--batch", "4", "--time-limit", "400",
                           "--compare", "none", "--db", str(db), "--report", "--hand", "--quiet"],
                          env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "unknown schedule" not in proc.stderr
    report = db / "report"
    texts = [p.read_text() for p in report.glob("*.md")]
    assert texts and any("tuned_gemm" in t for t in texts), sorted(p.name for p in report.iterdir())
    from reports import load_results

    hand = load_results(str(report / "hand"))
    tuned = hand[hand["name"] == "tuned_gemm"]
    assert len(tuned) == 1 and tuned["status"].iloc[0] == "ok", hand[["name", "status"]]


def test_the_tuner_checks_its_best_as_the_engine_checks_every_kernel():
    """One float64 check: the tuner's full check of its best (tuning.measure.full_error) is the
    engine's product_error, with the |A|·|B| scale where ‖ref‖ cancels (a single output)."""
    import numpy as np

    from schedules.reference import product_error
    from schedules.workloads import Gemm
    from tuning import measure as TM

    rng = np.random.default_rng(3)
    a, b = rng.uniform(-1, 1, (1, 64)).astype("float32"), rng.uniform(-1, 1, (64, 1)).astype("float32")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    out = (exact + 1e-3).astype("float32")

    class _Arg:
        def __init__(self, x):
            self.x, self.shape, self.dtype = x, x.shape, x.dtype

        def copyfrom(self, x):
            self.x = np.array(x)

        def numpy(self):
            return self.x

    class _Module(dict):
        entry_name = "main"

    class _Device:
        def sync(self):
            pass

    args = [_Arg(a), _Arg(b), _Arg(out)]
    module = _Module(main=lambda *xs: xs[2].copyfrom(out))
    err = TM.full_error(module, _Device(), args)
    assert err == pytest.approx(product_error(Gemm(1, 1, 64), out, [a, b]))
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert err == pytest.approx(float(np.linalg.norm(out - exact) / np.linalg.norm(scale)), rel=1e-6)


def test_the_results_row_records_the_step_and_configuration_a_best_step_chose():
    from reports.engine.harness import build_kernel

    row, _ = build_kernel({"workload": "gemm:1000x500x2001", "name": "best_gemm"})
    resolved = get("best_gemm").resolve(parse_workload("gemm:1000x500x2001"))
    assert row["chosen"] == resolved.chosen and row["chosen_step"] == resolved.step.name
    assert row["chosen_params"] == dataclasses.asdict(resolved.step_config) and row["params"] == {}


def test_diff_and_export_resolve_a_best_step_once(monkeypatch, tmp_path):
    """Every path that builds a best_* step (schedlab diff's two builds, the kernel object, the
    harness) asks the dispatcher's model once per build, not again for its build options."""
    from reports.engine import build as B
    from reports.engine.kernel import compile_kernel
    from reports.views.diff import diff

    calls, built = [], []
    rank = dispatch.rank
    monkeypatch.setattr(dispatch, "rank", lambda *a, **k: calls.append(a) or rank(*a, **k))
    with monkeypatch.context() as m:  # diff's builds, without compiling: their options are asked for before
        m.setattr(B, "build", lambda sch, target=None, pass_config=None: built.append(pass_config) or
                  SimpleNamespace(scheduled=sch.mod.script(), lowered="",
                                  device=SimpleNamespace(kernels=[], cuda="", ptx="")))
        diff("best_gemm", "split_k_gemm", "1024x512x2048", default_shapes={})
    assert len(calls) == 1 and len(built) == 2
    compile_kernel("best_fp16_gemm", "gemm:1000x500x2001:float16")
    assert len(calls) == 2
