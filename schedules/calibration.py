"""The constants of the dispatcher's model (:mod:`schedules.dispatch`), read at import from a JSON
file: ``$SCHEDLAB_CALIBRATION`` where it is set (a file ``schedlab calibrate --write FILE`` wrote),
else the package data file ``schedules/data/calibration.json``. ``schedlab calibrate`` fits them to a
calibration sweep (``schedlab sweep --set calibration``); a calibration's ``source`` names the sweeps
and ``calibrated_on`` the GPU they ran on (name, architecture, SM count), which the dispatcher compares
with the GPU it chooses for (:func:`schedules.dispatch.calibrated_elsewhere`). Do not edit one by
hand: run the sweep and the fit again (see reports' calibrate)."""

from __future__ import annotations

import json
import os
from importlib import resources

from .errors import ScheduleParamError

CALIBRATION_RESOURCE = ("schedules", "data/calibration.json")
ENV = "SCHEDLAB_CALIBRATION"


class CalibrationError(ScheduleParamError):
    """A calibration file that cannot be used; the message (one line) names it and says why."""


def calibration_path() -> str:
    """Where the packaged calibration lives (a file path)."""
    package, name = CALIBRATION_RESOURCE
    return str(resources.files(package).joinpath(name))


def active_path() -> str:
    """The calibration the dispatcher reads: ``$SCHEDLAB_CALIBRATION``, else the packaged one."""
    return os.environ.get(ENV) or calibration_path()


def _read(path: str, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise CalibrationError(f"{what}: cannot read it ({e.strerror or type(e).__name__})") from None
    except ValueError as e:
        raise CalibrationError(f"{what}: not a JSON file ({str(e)[:100]})") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{what}: not a calibration (a JSON object of the model's constants)")
    return data


def load_calibration(path: str | None = None) -> dict:
    """The model's constants from ``path`` (default: :func:`active_path`). A file other than the
    packaged one must hold every constant the packaged one does (it is a whole calibration, as
    ``schedlab calibrate --write`` writes it); raises CalibrationError, one line, if not."""
    path = path or active_path()
    packaged = calibration_path()
    what = f"{ENV}={path}" if path == os.environ.get(ENV) else f"calibration {path}"
    data = _read(path, what)
    if os.path.abspath(path) != os.path.abspath(packaged):
        missing = sorted(set(_read(packaged, f"calibration {packaged}")) - set(data))
        if missing:
            raise CalibrationError(f"{what}: not a whole calibration (no {', '.join(missing[:6])}"
                                   f"{', ...' if len(missing) > 6 else ''})")
    return data


CALIBRATION = load_calibration()


def tile_efficiency(cal: dict, key: str) -> float | None:
    """The calibrated efficiency of tile ``key`` (``"tma 128x192"``): its own where a sweep timed it;
    else, between two calibrated tiles of the family with the same ``block_m``, the straight line
    in ``block_n`` between theirs (a wider tile reuses each A row over more columns: its rate lies
    between its neighbours'); else None (the caller falls back on the family's default)."""
    eff = cal["efficiency"]
    if key in eff:
        return eff[key]
    head, _, size = key.rpartition(" ")
    try:
        bm, bn = (int(x) for x in size.split("x"))
    except ValueError:
        return None
    widths = sorted(int(k.rpartition("x")[2]) for k in eff if k.startswith(f"{head} {bm}x")
                    and k.rpartition("x")[2].isdigit())
    lo = [w for w in widths if w < bn]
    hi = [w for w in widths if w > bn]
    if lo and not hi and head == "tma" and bm == 256:
        # wider than the widest calibrated 256-row tile (a fitted width, schedules.dispatch_fitted): at the best
        # calibrated two-consumer rate. On an H200, over 20 random bf16 nt products, the 256 x 160 and 256 x 192
        # tiles this made the choice of 14 (before a sweep timed them) ran 1.15x faster than the tiles chosen at
        # 256 x 128's rate (geometric mean, 0.88-1.39x; reports/results/NVIDIA_H200/fitted_tiles)
        return max(v for k, v in eff.items() if k.startswith(f"{head} ") and int(k.rpartition(" ")[2].split("x")[0]) >= 128)
    if not (lo and hi):
        return None
    a, b = lo[-1], hi[0]
    ea, eb = eff[f"{head} {bm}x{a}"], eff[f"{head} {bm}x{b}"]
    return ea + (eb - ea) * (bn - a) / (b - a)
