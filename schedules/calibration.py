"""The constants of the dispatcher's model (:mod:`schedules.dispatch`), read at run time from the
package data file ``schedules/data/calibration.json``. ``schedlab calibrate --write`` writes that
file from a calibration sweep (``schedlab sweep --set calibration``); its ``source`` names the
sweeps and ``calibrated_on`` the GPU they ran on (name, architecture, SM count), which the dispatcher
compares with the GPU it chooses for (:func:`schedules.dispatch.calibrated_elsewhere`). Do not edit
it by hand: run the sweep and the fit again (see reports' calibrate)."""

from __future__ import annotations

import json
from importlib import resources

CALIBRATION_RESOURCE = ("schedules", "data/calibration.json")


def calibration_path() -> str:
    """Where the packaged calibration lives (a file path)."""
    package, name = CALIBRATION_RESOURCE
    return str(resources.files(package).joinpath(name))


def load_calibration(path: str | None = None) -> dict:
    """The model's constants from ``path`` (default: the packaged calibration)."""
    with open(path or calibration_path(), encoding="utf-8") as f:
        return json.load(f)


CALIBRATION = load_calibration()
