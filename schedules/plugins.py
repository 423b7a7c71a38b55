"""Plugins: your own steps, registered without editing the package (docs/plugins.md).

A plugin is a Python file or an importable module that registers steps with
:func:`schedules.registry.register`, placed ``after=`` a step of a ladder or in a ``ladder=`` of its
own, with the contract of every step (a frozen configuration dataclass deriving from
:class:`~schedules.step_config.StepConfig`, a builder, a docstring). Three ways to load one:

* ``schedlab --plugin FILE`` (repeatable, before or after the command), or :func:`load` from Python;
* ``SCHEDLAB_PLUGINS``: files and module names separated by ``os.pathsep``;
* an installed package's entry point in the ``schedlab.plugins`` group (``[project.entry-points."schedlab.plugins"]
  my_steps = "my_package.steps"``).

Loading a plugin only imports it: this module does no other I/O. What it loaded is recorded in
``SCHEDLAB_PLUGINS`` (files as absolute paths, modules by name, with their folder on ``PYTHONPATH``),
so that the worker processes that build, measure and tune, which inherit the environment, load the
same plugins, in the same order, when the registry is first asked for a step there. A plugin that
fails (an import error, a name that clashes, a step that breaks the contract) raises
:class:`~schedules.errors.PluginError`, one line naming the plugin and the cause, and leaves the
registry as it was.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
from importlib import metadata

from . import registry
from .errors import PluginError

ENV = "SCHEDLAB_PLUGINS"
GROUP = "schedlab.plugins"

_LOADED: dict[str, str] = {}  # source (an absolute path, a module name, "entry point NAME") -> its label


def loaded() -> dict[str, str]:
    """The plugins loaded in this process: source -> the label errors name it by."""
    return dict(_LOADED)


def is_file(source: str) -> bool:
    """Whether a plugin source names a file (``.py``, or a path) rather than a module."""
    return source.endswith(".py") or os.sep in source or (os.altsep or os.sep) in source


def load(*sources: str) -> list[str]:
    """Load plugins (files or module names), after those the environment names; returns their
    labels. Each is loaded once per process, and recorded in ``SCHEDLAB_PLUGINS`` for the worker
    processes. Raises PluginError (one line) for a plugin that fails."""
    load_environment()  # the entry points and SCHEDLAB_PLUGINS first, in the order a worker loads them
    labels = [_load(source) for source in sources if source]
    _record()
    return labels


def _load(source: str) -> str:
    if is_file(source):
        path = os.path.abspath(os.path.expanduser(source))
        label = os.path.basename(path)
        if path not in _LOADED:
            _import_file(path, label)
            _LOADED[path] = label
        return _LOADED[path]
    if source not in _LOADED:
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", source):
            raise PluginError(f"plugin {source}: neither a .py file nor a module name")
        _guard(source, lambda: importlib.import_module(source))
        _LOADED[source] = source
    return source


def _import_file(path: str, label: str):
    if not os.path.isfile(path):
        raise PluginError(f"plugin {label}: no such file ({path})")
    # a module of its own name, so that its dataclasses, pickling and tracebacks know where they live
    digest = hashlib.sha1(path.encode()).hexdigest()[:8]
    stem = re.sub(r"\W", "_", os.path.splitext(label)[0])
    name = f"schedlab_plugin_{stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        _guard(label, lambda: spec.loader.exec_module(module))
    except PluginError:
        sys.modules.pop(name, None)
        raise


def _guard(label: str, run):
    """Run a plugin's import as ``label``'s: the steps it registers carry its label, and if it fails
    the registry is restored and the error is one line naming it."""
    state = registry.snapshot()
    registry._LOADING.append(label)
    try:
        run()
    except BaseException as e:  # noqa: BLE001 - whatever a plugin raises (SystemExit included) is its error
        registry.restore(state)
        if isinstance(e, KeyboardInterrupt):
            raise
        raise PluginError(f"plugin {label}: {registry.describe(e)}") from e
    finally:
        registry._LOADING.pop()


def load_entry_points() -> list[str]:
    """Load the ``schedlab.plugins`` entry points of the installed packages (each names a module or
    an object in one; loading it imports the module)."""
    labels = []
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda ep: ep.name):
        key = f"entry point {ep.name}"
        if key not in _LOADED:
            label = f"{ep.name} ({ep.value})"
            _guard(label, ep.load)
            _LOADED[key] = label
        labels.append(_LOADED[key])
    return labels


def load_environment() -> list[str]:
    """Load the installed entry points, then the files and modules ``SCHEDLAB_PLUGINS`` names."""
    labels = load_entry_points()
    for source in os.environ.get(ENV, "").split(os.pathsep):
        if source.strip():
            labels.append(_load(source.strip()))
    _record()
    return labels


def _record():
    """Write what was loaded from files and modules into ``SCHEDLAB_PLUGINS`` (files as absolute
    paths), and each module's folder onto ``PYTHONPATH``, for the worker processes."""
    sources = [s for s in _LOADED if not s.startswith("entry point ")]
    if sources:
        os.environ[ENV] = os.pathsep.join(sources)
    before = os.environ.get("PYTHONPATH", "")
    paths = [p for p in before.split(os.pathsep) if p]
    for source in sources:
        if is_file(source):
            continue
        top = sys.modules.get(source.partition(".")[0])
        where = getattr(top, "__file__", None)
        if where:
            folder = os.path.dirname(os.path.dirname(where) if hasattr(top, "__path__") else where)
            if folder not in paths:
                paths.append(folder)
    if os.pathsep.join(paths) != before and paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(paths)


registry.on_first_use(load_environment)
