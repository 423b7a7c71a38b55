"""The README and docs/: the ladder table generated from the registry, the same steps as `schedlab list`,
short pages with short lines, and no commit-by-commit narrative."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from schedules import all_schedules  # importing schedules registers every step
from schedules.registry import ladder_steps_markdown, ladder_table_markdown
from scripts import update_readme_table as urt

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 210
MAX_LINE = 200
NARRATIVE = ("The last change", "Before that")


def _table_names(block: str) -> list[str]:
    """The schedule names of a ladder table, in order (second column, in backticks)."""
    return re.findall(r"^\| (?:gemm|gemv) \d+ \| `([^`]+)` \|", block, flags=re.M)


def test_readme_table_is_the_registrys():
    block = urt.current_block(README, urt.README_BEGIN, urt.README_END)
    assert block == ladder_table_markdown(), "README ladder table is stale: run python -m scripts.update_readme_table"


def test_docs_steps_is_the_registrys():
    block = urt.current_block(ROOT / "docs" / "steps.md", urt.STEPS_BEGIN, urt.STEPS_END)
    assert block == ladder_steps_markdown(), "docs/steps.md is stale: run python -m scripts.update_readme_table"


def test_update_script_check_passes():
    assert urt.main(["--check"]) == 0


def test_readme_table_matches_schedlab_list():
    out = subprocess.run([sys.executable, "-m", "scripts.schedlab", "list"], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=300).stdout
    listed = re.findall(r"^\s*(?:gemm|gemv) \d+\s+(\S+)", out, flags=re.M)
    assert listed, out
    in_readme = _table_names(urt.current_block(README, urt.README_BEGIN, urt.README_END))
    assert set(listed) - set(in_readme) == set(), "steps `schedlab list` prints that the README table lacks"
    assert set(in_readme) - set(listed) == set(), "steps in the README table that `schedlab list` does not print"
    assert in_readme == listed  # and in the same order
    assert listed == [s.name for s in all_schedules()]


def test_ladder_table_rows():
    table = ladder_table_markdown()
    rows = table.splitlines()[2:]
    assert len(rows) == len(all_schedules())
    for spec, row in zip(all_schedules(), rows):
        assert row.startswith(f"| {spec.label} | `{spec.name}` | ")
        text = row[len(f"| {spec.label} | `{spec.name}` | "):-2]
        # the summary whole, or cut at a clause boundary and marked
        assert text == spec.summary or (text.endswith(" …") and spec.summary.startswith(text[:-2])), row
        assert len(row) <= MAX_LINE


def test_readme_length_and_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    long = [(i + 1, len(line)) for i, line in enumerate(lines) if len(line) > MAX_LINE]
    assert not long, f"README.md lines over {MAX_LINE} characters (line, length): {long}"


def test_readme_keeps_the_two_commands():
    text = README.read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert f"    {ci}\n" in text  # CI runs the README's test command
    assert "    python3 -m venv .venv && .venv/bin/pip install -q -e '.[torch]' && .venv/bin/schedlab run\n" in text


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_docs_lines_and_no_narrative(path):
    text = path.read_text(encoding="utf-8")
    long = [(i + 1, len(line)) for i, line in enumerate(text.splitlines()) if len(line) > MAX_LINE]
    assert not long, f"{path.name} lines over {MAX_LINE} characters (line, length): {long}"
    for phrase in NARRATIVE:
        assert phrase.lower() not in text.lower(), f"{path.name}: commit narrative ({phrase!r})"


def test_docs_exist():
    names = {p.name for p in DOCS}
    assert {"results.md", "dispatcher.md", "layouts.md", "tuning.md", "reproducing.md", "steps.md"} <= names


def test_readme_no_narrative():
    text = README.read_text(encoding="utf-8").lower()
    for phrase in NARRATIVE:
        assert phrase.lower() not in text


# The layout the README describes: paths it may link to before they exist (the reports package split in progress).
PLANNED = ("reports/engine/", "reports/experiments/", "reports/views/")


@pytest.mark.parametrize("path", [README, *DOCS], ids=["README.md", *[p.name for p in DOCS]])
def test_relative_links_resolve(path):
    text = path.read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        resolved = (path.parent / target).resolve()
        rel = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
        if not resolved.exists() and not rel.startswith(PLANNED):
            missing.append(target)
    assert not missing, f"{path.name} links to paths that do not exist: {missing}"
