"""Names made from free text (a workload, a GPU's name, a job's parameters) that are safe in a file
name or an HTML id: the one helper every layer above uses."""

from __future__ import annotations

import re


def slug(text: str, keep: str = "", sep: str = "_", squeeze: bool = True) -> str:
    """``text`` with every character other than an ASCII letter, a digit or one of ``keep`` replaced
    by ``sep``: with ``squeeze``, a run of them by one ``sep``, and ``sep`` stripped from both ends;
    without, character for character (the length is kept)."""
    if not squeeze:
        return re.sub(f"[^A-Za-z0-9{re.escape(keep)}]", sep, text)
    return re.sub(f"[^A-Za-z0-9{re.escape(keep)}]+", sep, text).strip(sep)
