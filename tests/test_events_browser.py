"""Pauses and episodes in headless Chromium: a recording with sinus pauses and ventricular flutter
is served; its episodes are drawn as bands on the recording view, the pauses are listed in the
sidebar, and a click on one shows it in the recording.

Servers and pages as in ``tests/test_browser.py`` (its ``Page`` and ``browser``)."""
from __future__ import annotations

import pytest

from tests.support.served import Server
from test_browser import ARTIFACTS, UPDATE_S, Page, browser  # noqa: F401  (browser: the module's Chromium fixture)
from test_events import write_pauses_and_flutter

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("events-served")
    path, pauses, flutter = write_pauses_and_flutter(tmp)
    srv = Server(["--input", str(path), "--fs", "360", "--epochs", "3", "--device", "cpu", "--out", str(tmp / "runs")],
                 tmp / "server.log")
    try:
        srv.wait_http(120)
        yield srv, pauses, flutter
    finally:
        srv.stop()


def _pixel(png: bytes, x: float, y: float) -> tuple[int, int, int]:
    import io

    from PIL import Image

    return Image.open(io.BytesIO(png)).convert("RGB").getpixel((int(x), int(y)))


def test_episodes_are_drawn_listed_and_a_click_shows_one(served, browser):
    srv, pauses, (flutter_start, flutter_end) = served
    page = Page(browser, srv.url)
    page.wait_dashboard()
    # the bands: in the recording view, the flutter's stretch is tinted red and a stretch of sinus
    # rhythm is not (both looked at just under the frame's top edge, above the trace)
    view = page.page.locator(".ecg-view-signal .bk-Canvas").first
    view.scroll_into_view_if_needed()
    box = view.bounding_box()
    png = view.screenshot()
    top = page.page.evaluate("""() => { const v = Bokeh.index.find_one(Bokeh.documents[0].get_model_by_name('ecg-signal'));
        return v.frame.bbox.top; }""")
    inside = page.to_screen("signal", (flutter_start + flutter_end) / 2)[0] - box["x"]
    outside = page.to_screen("signal", 5.0)[0] - box["x"]
    red, _, blue = _pixel(png, inside, top + 4)
    assert red > blue + 20, f"no flutter band drawn: {(red, blue)}"
    assert _pixel(png, outside, top + 4)[0] - _pixel(png, outside, top + 4)[2] < 10
    # the list: pauses first, the longest on top; a click shows it in the recording
    rows = page.page.locator(".bk-DataTable .slick-row", has_text="pause")
    page.wait_until(lambda: rows.count() == len(pauses), "the pauses listed")
    first = rows.first.inner_text().split()
    longest = max(pauses, key=lambda p: p[1] - p[0])
    assert float(first[-1]) == pytest.approx(longest[1] - longest[0], abs=0.1)
    rows.first.click()
    page.wait_until(lambda: abs(page.x_range()[0] - (longest[0] - 3.0)) < 0.1, "the recording zoomed to the pause")
    assert page.x_range()[1] == pytest.approx(longest[1] + 3.0, abs=0.1)
    page.shot("events.png")
    assert not page.errors, "\n".join(page.errors)
    page.close()


def test_a_rejected_episode_leaves_the_recording_and_no_verdict_brings_it_back(served, browser):
    """'Not an episode' on the flutter takes its red band off the recording view in the open page
    (the list still shows it, as rejected); 'No verdict' draws it again."""
    srv, _, (flutter_start, flutter_end) = served
    page = Page(browser, srv.url)
    page.wait_dashboard()
    view = page.page.locator(".ecg-view-signal .bk-Canvas").first
    flutter = page.page.locator(".bk-DataTable .slick-row", has_text="flutter").first

    def band_drawn() -> bool:
        """A red tint just under the frame's top edge, at a few points across the flutter (where
        the trace does not reach, a red pixel is the band)."""
        view.scroll_into_view_if_needed()
        box, png = view.bounding_box(), view.screenshot()
        top = page.page.evaluate("""() => { const v = Bokeh.index.find_one(
            Bokeh.documents[0].get_model_by_name('ecg-signal')); return v.frame.bbox.top; }""")
        xs = [page.to_screen("signal", flutter_start + f * (flutter_end - flutter_start))[0] - box["x"]
              for f in (0.3, 0.5, 0.7)]
        return any(red > blue + 20 for red, _, blue in (_pixel(png, x, top + 4) for x in xs))

    def judge(button: str, verdict: str) -> None:
        flutter.click()
        page.wait_until(lambda: abs(page.x_range()[0] - (flutter_start - 3.0)) < 0.5, "the recording at the flutter")
        page.page.get_by_role("button", name=button, exact=True).click()
        page.wait_until(lambda: verdict in flutter.inner_text(), f"the flutter listed as {verdict!r}")

    assert band_drawn(), "no flutter band before any verdict"
    judge("Not an episode", "not an episode")
    page.wait_until(lambda: not band_drawn(), "the rejected flutter's band gone")
    page.shot("episode-rejected.png")
    judge("No verdict", "")
    page.wait_until(band_drawn, "the flutter's band back after 'No verdict'")
    assert "not an episode" not in flutter.inner_text()
    assert not page.errors, "\n".join(page.errors)
    page.close()


def test_lost_signal_is_drawn_and_listed(tmp_path, browser):
    """A recording whose only lead misses 6 s of samples (empty cells): the stretch is listed as
    signal lost and drawn as a dark grey band on the recording view, where sinus rhythm has none."""
    import numpy as np

    from pipeline import stress

    case = stress.make_case("pauses")
    lost = (30.0, 36.0)
    cells = np.char.mod("%.4f", case.signal).astype(object)
    cells[int(lost[0] * case.fs):int(lost[1] * case.fs)] = ""
    path = tmp_path / "dropout.csv"
    path.write_text("\n".join(cells) + "\n")
    srv = Server(["--input", str(path), "--fs", str(case.fs), "--epochs", "2", "--device", "cpu",
                  "--out", str(tmp_path / "runs")], tmp_path / "server.log")
    try:
        srv.wait_http(120)
        page = Page(browser, srv.url)
        page.wait_dashboard()
        rows = page.page.locator(".bk-DataTable .slick-row", has_text="signal lost")
        page.wait_until(lambda: rows.count() == 1, "the lost signal listed")
        assert float(rows.first.inner_text().split()[-1]) == pytest.approx(lost[1] - lost[0], abs=0.1)
        view = page.page.locator(".ecg-view-signal .bk-Canvas").first
        view.scroll_into_view_if_needed()
        box, png = view.bounding_box(), view.screenshot()
        top = page.page.evaluate("""() => { const v = Bokeh.index.find_one(
            Bokeh.documents[0].get_model_by_name('ecg-signal')); return v.frame.bbox.top; }""")
        inside = _pixel(png, page.to_screen("signal", sum(lost) / 2)[0] - box["x"], top + 4)
        outside = _pixel(png, page.to_screen("signal", 10.0)[0] - box["x"], top + 4)
        assert all(o - i > 20 for i, o in zip(inside, outside)), f"no band: {inside} against {outside}"
        bands = page.page.evaluate("""() => { const d = [...Bokeh.documents[0].all_models].find(
            m => m.name === 'ecg-episodes').data;   // the recording view's and the tachogram's alike
            return [...d.kind.keys()].map(i => [d.kind[i], d.x0[i], d.x1[i], d.color[i]]); }""")
        drawn = [band for band in bands if band[0] == "lost"]   # (the pause across it is drawn too, in doubt)
        assert len(drawn) == 1 and drawn[0][1:3] == pytest.approx(lost, abs=0.01) and drawn[0][3] == "#343a40", bands
        page.shot("lost-signal.png")
        assert not page.errors, "\n".join(page.errors)
        page.close()
    finally:
        srv.stop()
