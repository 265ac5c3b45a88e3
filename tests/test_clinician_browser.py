"""The dashboard as a Holter analyst first sees it, in headless Chromium at 1600 × 1000: a header
naming the recording (duration hh:mm:ss, heart-rate range in bpm, beats, outliers, pauses,
episodes) with the pipeline's timings behind "details"; the outlier table's first row on screen
without scrolling; column titles with units; one threshold slider; buttons that look like buttons;
counts whose nouns agree. And an archive page whose points carry the recordings' names, with its
totals and a search in the sidebar.

With ``ECG_SCREENSHOTS=1`` the dashboard (the whole page of a 1600 × 1000 window) and the archive
page (its top) are saved to ``docs/screenshots/`` (the README shows them). Servers and pages as in ``tests/test_browser.py``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import test_browser
from tests.support.served import ROOT, checked_page, serving
from test_browser import UPDATE_S, Page, browser, server  # noqa: F401  (the module's Chromium and tiny-run server)

pytestmark = pytest.mark.browser

SCREEN = {"width": 1600, "height": 1000}
SCREENSHOTS = ROOT / "docs" / "screenshots"
SAVE_SCREENSHOTS = os.environ.get("ECG_SCREENSHOTS") == "1"

# Whether an element is drawn as a button: a visible border, or a filled background.
LOOKS_LIKE_A_BUTTON_JS = """(el) => {
    const style = getComputedStyle(el);
    const visible = (colour) => !/rgba\\(.*,\\s*0\\)$/.test(colour) && colour !== 'transparent';
    const border = parseFloat(style.borderTopWidth) > 0 && style.borderTopStyle !== 'none'
        && visible(style.borderTopColor);
    return {border, filled: visible(style.backgroundColor), colour: style.borderTopColor, fill: style.backgroundColor};
}"""


@pytest.fixture
def screen(monkeypatch):
    """Pages of this test open at 1600 × 1000 (test_browser's Page takes its module's VIEWPORT)."""
    monkeypatch.setattr(test_browser, "VIEWPORT", SCREEN)


def _button(page: Page, name: str):
    return page.page.get_by_role("button", name=name, exact=True).first


def test_a_clinician_reads_the_dashboard_without_a_guide(server, browser, screen):  # noqa: F811
    with checked_page(Page(browser, server.url)) as page:
        page.wait_dashboard()
        assert page.page.evaluate("() => window.scrollY") == 0

        # The header: the recording, its duration, heart-rate range and counts; timings hidden.
        name = page.page.locator(".ecg-recording-name").first.inner_text()
        header = " ".join(page.page.locator(".ecg-facts").first.inner_text().split())
        assert re.fullmatch(r"synthetic.*\.csv", name), name
        assert "Duration 00:20:00" in header, header
        low, high = map(int, re.search(r"Heart rate (\d+)–(\d+) bpm", header).groups())
        assert 30 < low <= high < 200
        for words in (r"[\d,]+ beats", r"[\d,]+ outliers?", r"\d+ pauses?", r"\d+ episodes?"):
            assert re.search(words, header), (words, header)
        timings = page.page.get_by_text(re.compile(r"^Pipeline"))
        assert timings.count() == 0 or not timings.first.is_visible(), "the timings stay behind 'details'"
        page.page.get_by_text("details", exact=True).first.click()
        page.wait_until(lambda: page.page.get_by_text(re.compile(r"hash \d+")).first.is_visible(),
                        "the timings shown by 'details'")

        # The outlier table's first row on the first screen, its columns titled with units.
        row = page.page.locator(".ecg-view-outliers .slick-row").first.bounding_box()
        assert row is not None and 0 <= row["y"] and row["y"] + row["height"] <= SCREEN["height"], row
        titles = [t.strip() for t in page.page.locator(".ecg-view-outliers .slick-header-column").all_inner_texts()]
        titles = [" ".join(t.split()) for t in titles]
        for title in ("Time", "RR before (ms)", "Beat length (ms)", "RR before (× local RR)", "Shape rarity",
                      "Your label"):
            assert title in titles, titles
        assert not {"yours", "length (s)", "score pct"} & set(titles), titles
        cells = page.rows()[0].split("\n")
        assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d", cells[1]), cells
        assert any(re.fullmatch(r"1 in [\d,]+", c) for c in cells), cells
        assert page.page.locator(".ecg-view-outliers .slick-header-column span[title]").count() == len(titles)

        # One threshold slider on the whole page.
        assert page.page.get_by_text(re.compile(r"^Outlier threshold")).count() == 1

        # Buttons that look like buttons.
        for name in ("Remove label", "Undo", "WFDB (.rev)", "CSV", "Parquet", "Apply", "Clear selection"):
            look = _button(page, name).evaluate(LOOKS_LIKE_A_BUTTON_JS)
            assert look["border"] or look["filled"], (name, look)

        # Nouns agree with their counts: one beat labelled, then none.
        status = page.page.get_by_text(re.compile(r"labelled in all"))
        assert status.first.inner_text().startswith("0 beats labelled"), status.first.inner_text()
        page.page.locator(".ecg-view-outliers .slick-row").first.locator(".slick-cell.l0").click()
        page.wait_until(lambda: page.page.get_by_text(re.compile(r"your label")).count() > 0, "the focused beat")
        page.click_until(_button(page, "V"), lambda: page.page.get_by_text(
            re.compile(r"given to 1 beat · saved\. 1 beat labelled in all")).count() > 0, "one beat labelled")
        assert page.page.get_by_text(re.compile(r"(?<![\d,])1 beats")).count() == 0
        page.click_until(_button(page, "Undo"), lambda: page.page.get_by_text(
            re.compile(r"0 beats labelled in all")).count() > 0, "the undo")

        if SAVE_SCREENSHOTS:       # the whole recording again, with the top outlier focused beside the table
            _button(page, "Show the whole recording").click()
            page.page.get_by_text("details", exact=True).first.click()       # the timings hidden again
            page.page.evaluate("() => window.scrollTo(0, 0)")
            page.page.wait_for_timeout(2500)
            page.page.screenshot(path=str(SCREENSHOTS / "dashboard.png"), full_page=True)   # 1600 wide, all of it


@pytest.fixture(scope="module")
def archive_server(tmp_path_factory):
    """A served archive of three small recordings, one without outstanding beats."""
    from pipeline.synth import SynthConfig, synthesize, write_csv

    tmp = tmp_path_factory.mktemp("clinician-archive")
    inputs, out = tmp / "in", tmp / "runs"
    inputs.mkdir()
    for name, seed, pvc in (("calm", 1, 0.0), ("ectopic", 2, 0.06), ("holter-03", 3, 0.02)):
        write_csv(synthesize(SynthConfig(n_samples=100_000, seed=seed, pvc_fraction=pvc)), inputs / f"{name}.csv")
    done = subprocess.run([sys.executable, "-m", "pipeline", "batch", str(inputs), "--out", str(out), "--device", "cpu",
                           "--epochs", "2", "--workers", "1", "--quiet"], capture_output=True, text=True, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    with serving(["--device", "cpu", "--archive", str(out)], tmp / "server.log") as srv:
        yield srv


def test_the_archive_names_its_points_and_sums_itself_up(archive_server, browser, screen):  # noqa: F811
    with checked_page(Page(browser, archive_server.url)) as page:
        rows = page.page.locator(".ecg-view-archive .slick-row")
        rows.first.wait_for(timeout=UPDATE_S * 1000)
        names = sorted(r.split("\n")[0] for r in rows.all_inner_texts())
        assert names == ["calm.csv", "ectopic.csv", "holter-03.csv"]
        page.page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0 && "
                                    "Bokeh.documents[0].get_model_by_name('ecg-archive') !== null")
        # Every point's name written beside it on the canvas (three recordings: all among the named).
        drawn = page.page.evaluate("""() => Bokeh.documents[0].get_model_by_name('ecg-archive').renderers
            .filter((r) => r.glyph.type === 'Text').flatMap((r) => [...r.data_source.data.label])""")
        assert sorted(n for n in drawn if n) == names, drawn
        # The outlier axis ticks whole decades, labelled as outliers (not outliers + 1).
        ticks = page.page.evaluate("""() => Bokeh.documents[0].get_model_by_name('ecg-archive')
            .left[0].ticker.ticks.slice(0, 4)""")
        assert ticks == [1, 2, 11, 101], ticks

        assert page.page.get_by_text("3 recordings", exact=True).count() == 1        # the sidebar's totals
        assert page.page.get_by_text(re.compile(r"h · [\d,]+ beats · [\d,]+ outliers")).count() == 1
        if SAVE_SCREENSHOTS:
            page.page.wait_for_timeout(1000)
            page.page.screenshot(path=str(SCREENSHOTS / "archive.png"), clip={"x": 0, "y": 0, "width": SCREEN["width"],
                                                                              "height": 480})

        search = page.page.get_by_placeholder("name contains…")
        search.fill("ecto")
        page.wait_until(lambda: rows.count() == 1, "the search to keep one recording")
        rows.first.locator(".slick-cell.l0").click()
        page.page.wait_for_selector(".ecg-dashboard", timeout=UPDATE_S * 1000)
        page.wait_until(lambda: page.page.get_by_text("Open: ectopic.csv").count() > 0,
                        "the sidebar to sum up the open recording")
        assert page.page.locator(".ecg-recording-name").first.inner_text() == "ectopic.csv"
