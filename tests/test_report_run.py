"""The report page of a real run (no GPU: every step built, nothing timed), in headless Chromium:
it loads with no console errors, clicking a step's row shows its IR and its diff against the step
before it, and the table sorts. Skips, with the reason, where no browser can be started."""

import pytest

from tests.test_report_browser import assert_clean, browser, opened  # noqa: F401  (the browser fixture)

STEPS = ["naive_gemm", "thread_1d_gemm", "shared_cache_gemm"]


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    from reports.experiments.run import run

    out = tmp_path_factory.mktemp("run")
    df = run(["gemm:64x48x40"], STEPS, baselines=["numpy_cpu"], out_dir=str(out), progress=False, gpu=False)
    assert (out / "report.html").exists()
    return df, out / "report.html"


def test_a_run_ends_with_its_report_page(run_report):
    df, page = run_report
    doc = page.read_text()
    assert "Content-Security-Policy" in doc and "gemm:64x48x40" in doc
    assert doc.count('class="sched"') >= len(STEPS) or doc.count("sched-") >= len(STEPS)


def test_report_leaves_a_page_as_it_was_and_a_published_folder_alone(run_report, tmp_path, monkeypatch, capsys):
    """``schedlab report DIR``: the page a run wrote is left untouched when it would be the same; a
    published folder is written into only with --force (else --out writes the page elsewhere)."""
    from reports.views import page as page_module
    from scripts.schedlab import main

    _, page = run_report
    folder, before, stamp = page.parent, page.read_bytes(), page.stat().st_mtime_ns
    assert main(["report", str(folder)]) == 0
    assert "unchanged" in capsys.readouterr().out and page.stat().st_mtime_ns == stamp
    monkeypatch.setattr(page_module, "PUBLISHED", str(folder))  # as if it were reports/results/
    page.write_bytes(b"<p>the published page</p>")
    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is a published results folder" in err and len(err.strip().splitlines()) == 1
    assert page.read_bytes() == b"<p>the published page</p>"
    copy = tmp_path / "copy"
    assert main(["report", str(folder), "--out", str(copy)]) == 0
    assert (copy / "report.html").read_bytes() == before and page.read_bytes() == b"<p>the published page</p>"
    assert main(["report", str(folder), "--force"]) == 0
    assert page.read_bytes() == before


def test_the_report_of_a_run_in_the_browser(browser, run_report):  # noqa: F811
    from playwright.sync_api import expect

    _, page_file = run_report
    with opened(browser, page_file) as (page, log):
        assert "no GPU" in page.locator("header").inner_text() or "no GPU" in page.locator("main").inner_text()
        # a step's row opens its panel: its scheduled TIR, then its diff against the step before it
        row = page.locator("table.data tbody tr", has_text="shared_cache_gemm").first
        row.locator("td").nth(1).click()
        index = row.get_attribute("data-s")
        panel = page.locator(f"#sched-{index}")
        expect(panel).to_have_attribute("open", "")
        lines = panel.locator("pre.code .x-l")
        expect(lines.filter(has_text="A_shared")).not_to_have_count(0)
        panel.locator("button.view[data-view=diff]").click()
        diff = panel.locator(".diffview")
        expect(diff.locator("tr.add").filter(has_text="shared")).not_to_have_count(0)
        panel.locator("button.tab[data-stage=cuda]").click()
        expect(diff.locator("tr.add").filter(has_text="__shared__")).not_to_have_count(0)
        # the step table sorts by its register column
        header = page.locator("table.data thead th", has_text="registers").first
        col = page.locator("table.data thead th").all_inner_texts().index(header.inner_text())
        header.click()
        regs = page.eval_on_selector_all("table.data:first-of-type tbody tr",
                                         f"rs => rs.map(r => r.cells[{col}].getAttribute('data-v'))")
        nums = [float(v) for v in regs if v not in (None, "")]
        assert nums == sorted(nums) and len(nums) >= len(STEPS)
        assert_clean(page, log)
