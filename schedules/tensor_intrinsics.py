"""TVM's tensor intrinsics (``tvm.s_tir.tensor_intrin``: wmma, mma, ldmatrix...), imported at a
tenth of their usual cost.

MetaSchedule imports them whenever a ``TuneContext`` is made, and the import parses a few hundred
TVMScript functions. Each parse calls ``inspect.stack()``, which asks ``inspect.getmodule`` for
the module of every frame on the stack; for a frame whose file does not exist (``<frozen
importlib._bootstrap>``, ``<string>``) Python scans all of ``sys.modules`` again, every time: about
50 s of CPU on a 2-core host, most of a tuning run's start-up. The answer for such a frame depends
only on its file name, so during the import it is asked once per name."""

from __future__ import annotations

import inspect
import sys

MODULE = "tvm.s_tir.tensor_intrin"


def import_tensor_intrinsics():
    """Import (register) TVM's tensor intrinsics, once per process, with ``inspect.getmodule``
    answered once per file name for stack frames while the import runs (restored afterwards)."""
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    getmodule = inspect.getmodule
    by_file: dict = {}

    def getmodule_once(obj, _filename=None):
        if _filename is None or not inspect.isframe(obj):
            return getmodule(obj, _filename)
        if _filename not in by_file:
            by_file[_filename] = getmodule(obj, _filename)
        return by_file[_filename]

    inspect.getmodule = getmodule_once
    try:
        import tvm.s_tir.tensor_intrin as intrinsics
    finally:
        inspect.getmodule = getmodule
    return intrinsics
