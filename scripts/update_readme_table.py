"""Rewrite the README's ladder table, docs/steps.md's step list and schedules/data/steps.json from the registry.

    python -m scripts.update_readme_table            # rewrite the generated blocks and files
    python -m scripts.update_readme_table --check    # exit 1 (and say where) if one differs from the registry

Each block lies between two marker comments; only what is between them is rewritten. The table is
:func:`schedules.registry.ladder_table_markdown`, the list :func:`schedules.registry.ladder_steps_markdown`;
steps.json is every step as ``schedlab list --json`` prints it (what ``schedlab list`` reads, so that it
loads no TVM). ``tests/test_readme.py`` fails when any of them is out of date.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a file: python scripts/update_readme_table.py
    sys.path.insert(0, str(ROOT))

from scripts.steps_index import STEPS_FILE, registry_steps  # noqa: E402  (after the path above; no TVM until called)

README_BEGIN = "<!-- ladder table: generated from the registry (schedules.registry.ladder_table_markdown) -->"
README_END = "<!-- end ladder table -->"
STEPS_BEGIN = "<!-- steps: generated from the registry (schedules.registry.ladder_steps_markdown) -->"
STEPS_END = "<!-- end steps -->"


def blocks():
    """(file, begin marker, end marker, generated text) for every generated block."""
    from schedules import all_schedules  # noqa: F401  (importing schedules registers every step)
    from schedules.registry import ladder_steps_markdown, ladder_table_markdown

    return [(ROOT / "README.md", README_BEGIN, README_END, ladder_table_markdown()),
            (ROOT / "docs" / "steps.md", STEPS_BEGIN, STEPS_END, ladder_steps_markdown())]


def files():
    """(file, generated text) for every file generated whole: the step list ``schedlab list`` reads."""
    return [(Path(STEPS_FILE), json.dumps([r for r in registry_steps() if not r["plugin"]], indent=1) + "\n")]


def split(text: str, begin: str, end: str, where: str) -> tuple[str, str, str]:
    """(before and including ``begin``'s line, the block, ``end``'s line and after)."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise SystemExit(f"{where}: expected one {begin!r} line followed by one {end!r} line")
    head, rest = text.split(begin, 1)
    body, tail = rest.split(end, 1)
    return head + begin + "\n", body.strip("\n") + "\n", end + tail


def current_block(path: Path, begin: str, end: str) -> str:
    """The text between the markers in ``path`` (what the test compares with the registry)."""
    return split(path.read_text(encoding="utf-8"), begin, end, str(path))[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs from the registry")
    args = ap.parse_args(argv)
    stale = []
    for path, begin, end, generated in blocks():
        text = path.read_text(encoding="utf-8")
        head, body, tail = split(text, begin, end, str(path.relative_to(ROOT)))
        if body == generated:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not args.check:
            path.write_text(head + generated + tail, encoding="utf-8")
    for path, generated in files():
        if path.is_file() and path.read_text(encoding="utf-8") == generated:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not args.check:
            path.write_text(generated, encoding="utf-8")
    if args.check and stale:
        print(f"out of date with the registry: {', '.join(stale)} (python -m scripts.update_readme_table)",
              file=sys.stderr)
        return 1
    print(("rewrote " + ", ".join(stale)) if stale else "up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
