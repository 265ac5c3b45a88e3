"""The dashboard's security in headless Chromium: a stored label and a recording's file name that
are markup run no script when shown (no dialog, no element made of them, anywhere in the page's
shadow roots) and show as typed; a link naming another host in ``bokeh-absolute-url`` loads
nothing from it and the page still works.

Servers and pages as in ``tests/test_browser.py`` (its ``Page`` and ``browser``), with small runs.
The server's side (escaping in every pane, archive paths, the listening address) is tested in
``tests/test_security_server.py``.
"""
from __future__ import annotations

import re
from urllib.parse import urlparse

import pytest

from tests.support.served import checked_page, serving
from test_browser import UPDATE_S, Page, browser  # noqa: F401  (browser: the module's Chromium fixture)
from test_security_server import HOSTILE, HOSTILE_NAME, hostile_archive

pytestmark = pytest.mark.browser

INJECTED = "img[src='x'], img[onerror]"     # what markup that ran would have made (CSS pierces shadow roots)
FOREIGN = "127.0.0.1:9"                     # a host that serves nothing (the discard port)


def watch_dialogs(page: Page) -> list[str]:
    """The messages of the dialogs (alert, confirm, prompt) the page opens from now on."""
    dialogs: list[str] = []

    def seen(dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()
    page.page.on("dialog", seen)
    return dialogs


def assert_nothing_ran(page: Page, dialogs: list[str]) -> None:
    page.page.wait_for_timeout(1000)          # for an <img src=x> to fail to load and fire its onerror
    assert not dialogs, f"script from the page's data ran: {dialogs}"
    assert page.page.locator(INJECTED).count() == 0, "markup from the page's data became elements"


# --------------------------------------------------------------------------- a label
@pytest.fixture(scope="module")
def labelled_server(small_csv, tmp_path_factory):
    """A server of ``small_csv`` whose every beat carries the label ``HOSTILE``, saved before the
    server started (as a reviewer's label survives a restart)."""
    from dashboard.labels import ReviewLabels
    from dashboard.startup import settings_from
    from pipeline.run import run_pipeline

    tmp = tmp_path_factory.mktemp("labelled")
    args = ["--input", str(small_csv), "--epochs", "3", "--device", "cpu", "--out", str(tmp / "runs")]
    run = run_pipeline(settings_from(args, {}).request)
    ReviewLabels.for_run(run).set(run.beats["fiducial"].to_numpy(), HOSTILE)
    with serving(args, tmp / "server.log") as srv:
        yield srv


def test_a_stored_label_that_is_markup_shows_as_text_and_runs_nothing(labelled_server, browser):  # noqa: F811
    with checked_page(Page(browser, labelled_server.url)) as page:
        dialogs = watch_dialogs(page)
        page.wait_dashboard()
        rows = page.rows()
        assert rows and HOSTILE in rows[0], rows[:3]                 # the table's cell: text
        first_cell = page.page.locator(".ecg-view-outliers .slick-row").first.locator(".slick-cell.l0")
        page.click_until(first_cell, lambda: page.page.get_by_text(re.compile(r"· your label")).count() > 0,
                         "the beat's details")
        assert_nothing_ran(page, dialogs)
        assert page.page.get_by_text(HOSTILE, exact=True).count() > 0, "the label should show as typed"

        typed = "<img src=x onerror=alert(3)>"                       # a new free-text label, from the page
        box = page.page.get_by_placeholder("your own label")
        box.fill(typed)
        box.press("Enter")
        page.page.get_by_role("button", name="Apply", exact=True).click()
        page.wait_until(lambda: page.page.get_by_text(re.compile(r"given to 1 beat")).count() > 0, "the label applied")
        for tab in ("Strip", "Families"):                            # the views that draw labels
            page.page.locator(".bk-tab", has_text=tab).first.click()
            page.page.wait_for_timeout(1000)
        assert_nothing_ran(page, dialogs)
        assert page.page.get_by_text(typed, exact=True).count() > 0, "the typed label should show as typed"


# --------------------------------------------------------------------------- a file name, a link
@pytest.fixture(scope="module")
def archive_server(tmp_path_factory):
    """A server of an archive of one recording named ``HOSTILE_NAME``."""
    tmp = tmp_path_factory.mktemp("archive")
    with serving(["--device", "cpu", "--archive", str(hostile_archive(tmp))], tmp / "server.log") as srv:
        yield srv


def test_a_recording_named_with_markup_shows_as_text_and_runs_nothing(archive_server, browser):  # noqa: F811
    with checked_page(Page(browser, archive_server.url)) as page:
        dialogs = watch_dialogs(page)
        rows = page.page.locator(".ecg-view-archive .slick-row")
        rows.first.wait_for(timeout=UPDATE_S * 1000)
        assert HOSTILE_NAME in rows.first.inner_text()               # the table's cell: text

        # The overview's tooltip names the recording (Bokeh writes a field's value as text).
        page.page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0 && "
                                    "Bokeh.documents[0].get_model_by_name('ecg-archive') !== null")
        x, y = page.page.evaluate("() => { const d = Bokeh.documents[0].get_model_by_name('ecg-archive')"
                                  ".renderers[0].data_source.data; return [d.x[0], d.y[0]]; }")
        tooltip = page.page.locator("[data-value]", has_text=HOSTILE_NAME)

        def hovered() -> bool:
            sx, sy = page.to_screen("archive", x, y)
            page.page.mouse.move(sx - 20, sy - 20)
            page.page.mouse.move(sx, sy, steps=4)
            return tooltip.count() > 0
        page.wait_until(hovered, "the overview's tooltip")
        assert_nothing_ran(page, dialogs)

        rows.first.locator(".slick-cell.l0").click()                # open it
        page.page.wait_for_selector(".ecg-dashboard", timeout=UPDATE_S * 1000)
        assert_nothing_ran(page, dialogs)
        page.wait_until(lambda: page.page.get_by_text(f"input {HOSTILE_NAME}").count() > 0,
                        "the sidebar to name the recording as it is named")


def test_a_link_naming_another_script_host_loads_nothing_from_it(archive_server, browser):  # noqa: F811
    with checked_page(Page(browser, archive_server.url)) as page:
        requested: list[str] = []
        page.page.on("request", lambda request: requested.append(request.url))
        page.page.goto(f"{archive_server.url}?bokeh-absolute-url=http://{FOREIGN}/evil")
        urls = page.page.evaluate("() => [...document.querySelectorAll('script[src], link[href]')]"
                                  ".map(e => e.src || e.href)")
        assert [u for u in urls if urlparse(u).netloc == FOREIGN] == [], "the page names the foreign host"
        page.page.locator(".ecg-view-archive .slick-row").first.wait_for(timeout=UPDATE_S * 1000)   # it works
        assert [u for u in requested if urlparse(u).netloc == FOREIGN] == [], "the page asked the foreign host"
