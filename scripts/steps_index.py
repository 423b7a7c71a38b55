"""What the CLI knows of the steps before it imports TVM: schedules/data/steps.json (every built-in
step as ``schedlab list --json`` prints it, written by ``python -m scripts.update_readme_table``) and
whether any plugin is named. ``schedlab list``, ``--help`` and refused arguments answer from here,
without the 3-4 s that importing TVM (and with it torch) takes."""

from __future__ import annotations

import json
import os
from importlib import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# schedules.plugins' ENV and GROUP, named here without importing it (it imports the registry: TVM);
# tests/test_plugins.py checks that they agree
PLUGINS_ENV = "SCHEDLAB_PLUGINS"
PLUGINS_GROUP = "schedlab.plugins"


def plugin_sources(args) -> list[str]:
    """The plugins --plugin names (before and after the command)."""
    return [*(getattr(args, "plugin_before", None) or ()), *(getattr(args, "plugin", None) or ())]


def plugins_configured(args) -> bool:
    """Whether any plugin is named: --plugin, SCHEDLAB_PLUGINS or an installed package's
    ``schedlab.plugins`` entry point (read from the installed metadata: no TVM)."""
    return bool(plugin_sources(args) or os.environ.get(PLUGINS_ENV, "").strip()
                or metadata.entry_points(group=PLUGINS_GROUP))


STEPS_FILE = os.path.join(ROOT, "schedules", "data", "steps.json")


def step_record(s) -> dict:
    """A step as ``schedlab list --json`` prints it (and schedules/data/steps.json holds it)."""
    return {"ladder": s.ladder, "step": s.step, "label": s.label, "name": s.name, "kind": s.kind,
            "aliases": list(s.aliases), "tags": list(s.tags), "summary": s.summary, "dtypes": list(s.input_dtypes),
            "layouts": list(s.layouts), "batched": s.batched, "epilogues": s.epilogues, "archs": list(s.config_cls.archs),
            "min_arch": s.config_cls.min_arch or None, "plugin": s.plugin or None,
            "search_space": {k: list(v) for k, v in s.config_cls.search_space.items()}}


def registry_steps() -> list[dict]:
    """Every registered step, in ladder order, as :func:`step_record`s (imports the registry: TVM)."""
    from schedules import all_schedules  # heavy (TVM): a command's module

    return [step_record(s) for s in all_schedules()]


def list_steps(args=None) -> list[dict]:
    """What ``schedlab list`` prints: schedules/data/steps.json, the registry's steps written out by
    ``python -m scripts.update_readme_table`` (tests/test_readme.py fails when it differs from the
    registry), so that listing the steps loads no TVM; the registry itself where that file is missing
    or unreadable, and where plugins are named (their steps are the registry's)."""
    if args is not None and plugins_configured(args):
        return registry_steps()
    try:
        with open(STEPS_FILE, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return registry_steps()
