"""The served dashboard in headless Chromium: progress → dashboard without a reload, no console
errors, a brush in the length histogram filters the other views and the outlier table, a box in
the latent plane too and a double-click clears it, a click on an outlier zooms the recording to
that beat, and two sessions keep their own selections.

Starts ``panel serve dashboard/app.py`` on a free localhost port with a tiny run (300k samples,
3 epochs, a temporary cache folder). Screenshots go to ``test-artifacts/``.
"""
from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.support.served import CHROMIUM, CHROMIUM_ARGS, Server

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
VIEWPORT = {"width": 1600, "height": 1250}
# A patch that names a model the page does not have fails in BokehJS with "reference pNNNN isn't
# known": once seen under load when the raster, compiled in the background, was swapped in outside
# Panel's hold while a new session's models waited for the websocket (SignalChart.swap_in_raster
# now holds it). On such a failure this says, in the console (so in ``Page.errors``), which
# unknown models the patch named and in which events.
PATCH_DIAGNOSIS_JS = """(() => {
  const install = () => {
    if (!(window.Bokeh && Bokeh.require)) return false;
    const {Document} = Bokeh.require("document/document");
    const apply = Document.prototype.apply_json_patch;
    Document.prototype.apply_json_patch = function (patch, buffers) {
      try {
        return apply.call(this, patch, buffers);
      } catch (err) {
        if (String(err).includes("isn't known")) {
          const known = this._all_models, unknown = [];
          const walk = (value, where) => {
            if (value === null || typeof value !== "object" || value.type === "bytes") return;
            if (typeof value.id === "string" && Object.keys(value).length === 1 && !known.has(value.id)) {
              unknown.push(`${value.id} in ${where}`);
            }
            for (const key of Object.keys(value)) walk(value[key], where);
          };
          for (const event of patch.events) {
            walk(event, `${event.kind} ${event.model ? event.model.id : ""}.${event.attr || ""}`);
          }
          const named = unknown.slice(0, 12).join("; ");
          console.error(`patch of ${patch.events.length} events named unknown models: ${named}`);
        }
        throw err;
      }
    };
    return true;
  };
  if (!install()) {
    const timer = setInterval(() => { if (install()) clearInterval(timer); }, 5);
  }
})();"""
READY_S = 240        # server start + tiny pipeline + warm-up, on a busy 2-core machine
UPDATE_S = 45        # one interaction's round trip, generously

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not found (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


# --------------------------------------------------------------------------- the server
APP_ARGS = ["--samples", "300000", "--epochs", "3", "--device", "cpu"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    ARTIFACTS.mkdir(exist_ok=True)
    tmp = tmp_path_factory.mktemp("served")
    srv = Server([*APP_ARGS, "--out", str(tmp / "runs")], tmp / "server.log")
    try:
        srv.wait_http(120)
        yield srv
    finally:
        srv.stop()
        shutil.copy(srv.log_path, ARTIFACTS / "server.log")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


# --------------------------------------------------------------------------- page helpers
class Page:
    """One browser session of the dashboard, collecting console errors."""

    def __init__(self, browser, url: str):
        self.context = browser.new_context(viewport=VIEWPORT)
        self.context.add_init_script(script=PATCH_DIAGNOSIS_JS)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"{time.strftime('%X')} console: {m.text}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"{time.strftime('%X')} page error: {e}"))
        self.page.goto(url)

    def wait_dashboard(self, progress_shot: str | None = None) -> bool:
        """Wait for the dashboard; True when the progress view was shown first."""
        self.page.wait_for_selector(".ecg-progress, .ecg-dashboard", timeout=READY_S * 1000)
        saw_progress = self.page.locator(".ecg-progress").count() > 0
        if saw_progress and progress_shot:
            self.page.wait_for_timeout(1500)
            self.shot(progress_shot)
        self.page.wait_for_selector(".ecg-dashboard", timeout=READY_S * 1000)
        self.page.wait_for_function("() => window.Bokeh && Bokeh.documents.length > 0 && "
                                    "Bokeh.documents[0].get_model_by_name('ecg-signal') !== null",
                                    timeout=UPDATE_S * 1000)
        self.page.wait_for_selector(".ecg-view-outliers .slick-row", timeout=UPDATE_S * 1000)
        self.page.wait_for_timeout(1500)  # let the rasters land
        return saw_progress

    def count(self) -> int:
        text = self.page.locator(".ecg-count").first.inner_text()
        return int(re.search(r"([\d,]+) of", text).group(1).replace(",", ""))

    def rows(self) -> list[str]:
        return self.page.locator(".ecg-view-outliers .slick-row").all_inner_texts()

    def version(self) -> str:
        """The selection version every view shows (changes in the same message as the views)."""
        return self.page.evaluate("() => Bokeh.documents[0].get_model_by_name('ecg-version').text")

    def view_png(self, name: str) -> bytes:
        return self.page.locator(f".ecg-view-{name}").first.screenshot()

    def x_range(self) -> tuple[float, float]:
        return tuple(self.page.evaluate(
            "() => { const r = Bokeh.documents[0].get_model_by_name('ecg-signal').x_range;"
            " return [r.start, r.end]; }"))

    def canvas_box(self, view: str) -> dict:
        canvas = self.page.locator(f".ecg-view-{view} .bk-Canvas").first
        canvas.scroll_into_view_if_needed()
        return canvas.bounding_box()

    def brush(self, view: str, start: float, stop: float, top: float = 0.5, bottom: float = 0.5) -> None:
        """Drag across a fraction [start, stop] of a chart's width (and [top, bottom] of its
        height: a box in the latent plane); the chart's active drag tool is its box select."""
        box = self.canvas_box(view)
        x0, x1 = box["x"] + box["width"] * start, box["x"] + box["width"] * stop
        y0, y1 = box["y"] + box["height"] * top, box["y"] + box["height"] * bottom
        self.page.mouse.move(x0, y0)
        self.page.mouse.down()
        self.page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=6)
        self.page.mouse.move(x1, y1, steps=6)
        self.page.mouse.up()

    def to_screen(self, view: str, x: float, y: float | None = None) -> tuple[float, float]:
        """Page coordinates of the data point (x, y) in a view's figure (y: the frame's middle)."""
        return tuple(self.page.evaluate("""([name, x, y]) => {
            const view = Bokeh.index.find_one(Bokeh.documents[0].get_model_by_name(name));
            const box = view.canvas_view.el.getBoundingClientRect(), frame = view.frame;
            const sy = y === null ? frame.bbox.vcenter : frame.y_scale.compute(y);
            return [box.left + frame.x_scale.compute(x), box.top + sy]; }""", [f"ecg-{view}", x, y]))

    def quantiles(self, view: str, lo: float, hi: float) -> tuple[float, float]:
        """The values at the ``lo`` and ``hi`` quantiles of a histogram's beats (from its bars)."""
        return tuple(self.page.evaluate("""([name, lo, hi]) => {
            const d = Bokeh.documents[0].get_model_by_name(name).renderers[0].data_source.data;
            const total = d.all.reduce((a, b) => a + b, 0); let run = 0, a = null, b = null;
            for (let i = 0; i < d.all.length; i++) { run += d.all[i];
                if (a === null && run >= lo * total) a = d.left[i];
                if (b === null && run >= hi * total) b = d.right[i]; }
            return [a, b]; }""", [f"ecg-{view}", lo, hi]))

    def brush_values(self, view: str, x0: float, x1: float) -> None:
        """Drag across the data range [x0, x1] of a histogram."""
        (a, y), (b, _) = self.to_screen(view, x0), self.to_screen(view, x1)
        self.page.mouse.move(a, y)
        self.page.mouse.down()
        self.page.mouse.move((a + b) / 2, y, steps=6)
        self.page.mouse.move(b, y, steps=6)
        self.page.mouse.up()

    def double_click(self, view: str) -> None:
        box = self.canvas_box(view)
        self.page.mouse.dblclick(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)

    def wait_until(self, predicate, what: str, timeout: float = UPDATE_S) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return
            self.page.wait_for_timeout(250)
        raise AssertionError(f"timed out waiting for {what}")

    def click_until(self, locator, predicate, what: str) -> None:
        """Click ``locator`` until ``predicate`` holds, as a person clicks again when a click
        did not take: on a busy machine a view above can still grow after an update (the
        sidebar's summary, say) and move the button between Playwright's check and its click."""
        deadline = time.time() + UPDATE_S
        while time.time() < deadline:
            locator.click()
            try:
                self.wait_until(predicate, what, timeout=5)
                return
            except AssertionError:
                self.shot(f"click-not-taken-{int(time.time())}.png")
        raise AssertionError(f"timed out waiting for {what}")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)

    def close(self) -> None:
        self.context.close()


def _seconds(hms: str) -> float:
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


# --------------------------------------------------------------------------- tests
def test_brush_filters_the_views_and_a_click_zooms_to_the_beat(server, browser):
    page = Page(browser, server.url)
    try:
        ready_before = "ECG dashboard ready" in server.log()
        saw_progress = page.wait_dashboard(progress_shot="progress.png")
        if not ready_before:
            assert saw_progress, "the page should show the progress view while the pipeline runs"
        page.shot("dashboard.png")

        total, rows, x_whole = page.count(), page.rows(), page.x_range()
        latent, scores = page.view_png("latent"), page.view_png("scores")
        assert total > 500 and len(rows) > 0
        assert x_whole[1] - x_whole[0] > 600   # the whole 20-minute recording

        # Brush most of the length histogram: fewer beats, another table, redrawn charts.
        page.canvas_box("lengths")
        page.brush_values("lengths", *page.quantiles("lengths", 0.02, 0.99))
        page.wait_until(lambda: page.count() < total, "the selection count to drop")
        page.wait_until(lambda: page.rows() != rows, "the outlier table to change")
        page.page.wait_for_timeout(1500)
        selected = page.count()
        assert 0 < selected < total
        assert page.view_png("latent") != latent, "the latent space should show the selection"
        assert page.view_png("scores") != scores, "the score distribution should show the selection"
        page.shot("selection.png")

        # A box in the latent plane narrows the selection further; a double-click there clears it.
        brushes = page.page.locator(".ecg-summary .ecg-muted").first
        page.brush("latent", 0.3, 0.8, top=0.2, bottom=0.8)          # inside the plot's frame
        page.wait_until(lambda: "Shape z1" in brushes.inner_text(), "the latent brush")
        page.double_click("latent")
        page.wait_until(lambda: "Shape z1" not in brushes.inner_text(), "the latent brush to clear")
        page.wait_until(lambda: page.count() == selected, "the length brush alone again")

        # Click the top outlier: the recording zooms to a few seconds around that beat.
        row = page.page.locator(".ecg-view-outliers .slick-row").first
        beat_time = _seconds(row.locator(".slick-cell.l1").inner_text())
        page.click_until(row.locator(".slick-cell.l0"), lambda: page.x_range()[1] - page.x_range()[0] < 30,
                         "the recording to zoom in")
        lo, hi = page.x_range()
        assert lo < beat_time < hi and hi - lo < 30
        page.page.wait_for_timeout(2000)
        assert page.count() == selected, "zooming to a beat keeps the beat views' selection"
        page.shot("zoomed.png")
        assert not page.errors, "\n".join(page.errors)
    finally:
        page.close()


def test_two_sessions_keep_their_own_selections(server, browser):
    alice, bob = Page(browser, server.url), Page(browser, server.url)
    try:
        alice.wait_dashboard()
        bob.wait_dashboard()
        total = alice.count()
        assert bob.count() == total
        bob_rows = bob.rows()

        alice.canvas_box("lengths")
        alice.brush_values("lengths", *alice.quantiles("lengths", 0.02, 0.99))
        alice.wait_until(lambda: alice.count() < total, "Alice's selection")
        alice_count = alice.count()
        bob.page.wait_for_timeout(2000)
        assert bob.count() == total and bob.rows() == bob_rows, "Bob must not see Alice's selection"

        bob.brush("scores", 0.18, 0.4)
        bob.wait_until(lambda: bob.count() < total, "Bob's selection")
        alice.page.wait_for_timeout(2000)
        assert bob.count() != alice_count
        assert alice.count() == alice_count, "Alice must not see Bob's selection"
        alice.shot("session-a.png")
        bob.shot("session-b.png")
        assert not alice.errors and not bob.errors, "\n".join(alice.errors + bob.errors)
    finally:
        alice.close()
        bob.close()


# Each new picture of the recording, when it arrived; and a browser slowed down to take 150 ms
# over each one (a busy machine), so that pictures sent at the hand's pace would queue.
SLOW_PICTURES_JS = """() => {
    const raster = Bokeh.documents[0].get_model_by_name('ecg-raster');
    window.__pictures = [];
    raster.properties.data.change.connect(() => {
        window.__pictures.push({at: performance.now(), x0: raster.data.x[0], x1: raster.data.x[0] + raster.data.dw[0]});
        const until = performance.now() + 150;
        while (performance.now() < until) {}
    });
}"""


def test_a_pan_in_a_slow_browser_ends_with_its_last_picture_not_a_queue(server, browser):
    """The server draws a new window of the recording only once the browser has taken the last
    picture: after a one-second drag in a browser that takes 150 ms over each picture, at most the
    picture on its way and the final window's arrive after the mouse-up (none, when the final
    window's came before it), and the last is the final window. (Drawn at the pace of the hand, the
    pictures queued for a second after the mouse-up.)"""
    page = Page(browser, server.url)
    try:
        page.wait_dashboard()
        page.page.wait_for_timeout(3000)           # Datashader compiled: the window is drawn as a raster
        page.page.evaluate(SLOW_PICTURES_JS)
        box = page.canvas_box("signal")
        y = box["y"] + box["height"] * 0.5
        page.page.mouse.move(box["x"] + box["width"] * 0.5, y)
        page.page.mouse.wheel(0, -400)             # zoom in, so there is room to pan
        page.wait_until(lambda: page.page.evaluate("() => window.__pictures.length") > 0, "the zoomed picture")
        page.page.wait_for_timeout(1500)
        page.page.mouse.move(box["x"] + box["width"] * 0.8, y)
        page.page.mouse.down()
        for k in range(1, 61):                     # one second at 60 moves a second
            page.page.mouse.move(box["x"] + box["width"] * (0.8 - 0.5 * k / 60), y)
            page.page.wait_for_timeout(16)
        released = page.page.evaluate("() => performance.now()")
        page.page.mouse.up()
        lo, hi = page.x_range()
        tol = 1e-6 * (hi - lo)
        page.wait_until(lambda: page.page.evaluate(
            "([lo, hi, tol]) => window.__pictures.some(p => Math.abs(p.x0 - lo) <= tol && Math.abs(p.x1 - hi) <= tol)",
            [lo, hi, tol]), "the final window's picture")
        page.page.wait_for_timeout(2000)
        pictures = page.page.evaluate("() => window.__pictures")
        after = [p for p in pictures if p["at"] >= released]
        assert len(after) <= 2, after
        assert abs(pictures[-1]["x0"] - lo) <= tol and abs(pictures[-1]["x1"] - hi) <= tol, (pictures[-3:], lo, hi)
        assert not page.errors, "\n".join(page.errors)
    finally:
        page.close()


MODEL_INDEX_JS = """() => {
    const doc = Bokeh.documents[0];
    const ids = () => [...doc._all_models.keys()].sort().join(',');
    const kept = ids();
    doc._recompute_all_models();          // BokehJS's own full walk, which the speedups skip
    return {skipped: window.ecgBokehSpeedups.skipped_walks, exact: ids() === kept, models: doc._all_models.size};
}"""

CSS_VARIABLES_JS = """() => {
    const {original} = window.ecgBokehSpeedups;
    const {VisualProperties} = Bokeh.require('core/visuals/visual');
    let looked = 0;
    const defined = [];
    for (const view of Bokeh.documents[0].views_manager.all_views()) {
        for (const visual of view.visuals || []) {
            if (!(visual instanceof VisualProperties)) continue;
            for (const attr of visual.attrs) {
                const name = attr.replaceAll('_', '-'), value = original.get_css_value.call(visual, name);
                looked += 1;
                if (value !== '') defined.push(`${visual.css_prefix}${name}: ${value}`);
            }
        }
    }
    return {looked, defined};
}"""


def test_the_bokeh_speedups_keep_the_page_as_bokeh_would_draw_it(server, browser):
    """dashboard/assets/bokeh_speedups.js skips BokehJS's walk of every model after a patch that brings no
    new model, and its lookup of CSS variables for every visual property. Both must be exact: after
    brushes (data-only patches) and a tab opened (a patch of new models), BokehJS's own walk finds
    the same models as the page's index; and the page defines no ``--bk-*`` variable that the
    original lookup would have found."""
    page = Page(browser, server.url)
    try:
        page.wait_dashboard()
        total = page.count()
        page.brush("scores", 0.18, 0.4)
        page.wait_until(lambda: page.count() < total, "the brush")
        page.page.locator(".bk-tab", has_text="Families").first.click()
        page.page.locator(".ecg-view-families .slick-row").first.wait_for(timeout=UPDATE_S * 1000)
        version = page.version()
        page.double_click("scores")
        page.wait_until(lambda: page.version() != version, "the brush to clear")

        index = page.page.evaluate(MODEL_INDEX_JS)
        assert index["skipped"] >= 2 and index["exact"] and index["models"] > 300, index
        css = page.page.evaluate(CSS_VARIABLES_JS)
        assert css["looked"] > 500 and not css["defined"], css
        assert not page.errors, "\n".join(page.errors)
    finally:
        page.close()


PAINTS_JS = """() => {
    const {PlotView} = Bokeh.require('models/plots/plot');
    const paint = PlotView.prototype._actual_paint;
    window.__paints = [];
    PlotView.prototype._actual_paint = function () {
        const lower = [...this._invalidated_painters].filter((p) => p.model.level != 'overlay');
        window.__paints.push({plot: this.model.name, primary: this._invalidate_all || lower.length > 0,
                              lower: lower.map((p) => `${p.model.type} (${p.model.level})`)});
        return paint.call(this);
    };
}"""

# A plane's view moved right, so that the image's fullest column of pixels lies 25 px left of the
# frame, over the axis; then, once repainted (the server's re-binned picture comes later), the
# overlay canvas' pixels left of the frame, and how many of the image's pixels lie there.
PANNED_PLANE_JS = """async (name) => {
    const model = Bokeh.documents[0].get_model_by_name(name), view = Bokeh.index.find_one(model);
    const source = model.renderers.find((r) => r.level == 'overlay').data_source.data;
    const image = source.image[0], [rows, columns] = image.shape;
    const filled = Array.from({length: columns}, (_, j) => {
        let n = 0;
        for (let i = 0; i < rows; i++) n += (image[i * columns + j] >>> 24) > 0;
        return n;
    });
    const fullest = filled.indexOf(Math.max(...filled));
    const column_x = (j) => source.x[0] + (j + 0.5) * source.dw[0] / columns;
    const frame = view.frame.bbox, {start, end} = model.x_range, per_px = (end - start) / frame.width;
    const repainted = new Promise((resolve) => {
        const done = () => { view.repainted.disconnect(done); resolve(); };
        view.repainted.connect(done);
    });
    const moved = column_x(fullest) + 25 * per_px;
    model.x_range.setv({start: moved, end: moved + (end - start)});
    await repainted;
    const outside = filled.filter((n, j) => { const px = frame.left + (column_x(j) - moved) / per_px;
                                              return px >= 0 && px < frame.left - 1; }).reduce((a, b) => a + b, 0);
    const layer = view.canvas_view.overlays, r = layer.pixel_ratio;
    const pixels = layer.ctx.getImageData(0, Math.round(frame.top * r), Math.round((frame.left - 1) * r),
                                          Math.round(frame.height * r)).data;
    let shown = 0;
    for (let i = 3; i < pixels.length; i += 4) shown += pixels[i] > 0;
    return {image_pixels_left_of_frame: outside, drawn_left_of_frame: shown};
}"""


def test_a_brush_repaints_only_the_overlays_of_the_charts_that_follow_it(server, browser):
    """What a brush changes is drawn on each plot's overlay canvas (dashboard/charts.py), so the
    charts that follow a brush repaint that canvas and not their axes, grid and the layers behind.
    Its glyphs stay clipped to the frame: a plane's picture moved partly left of the frame is drawn
    inside the axes only (BokehJS leaves the overlay level unclipped; dashboard/assets/bokeh_speedups.js)."""
    page = Page(browser, server.url)
    try:
        page.wait_dashboard()
        page.page.evaluate(PAINTS_JS)

        def quiet() -> bool:
            """Nothing repainted for a second: the recording's raster at the plot's real width is
            in (it comes late on a busy machine, or on a first run that compiles the kernels)."""
            page.page.evaluate("() => { window.__paints = []; }")
            page.page.wait_for_timeout(1000)
            return not page.page.evaluate("() => window.__paints.length")
        page.wait_until(quiet, "the page to stop repainting")
        version = page.version()
        page.brush("lengths", 0.2, 0.5)
        page.wait_until(lambda: page.version() != version, "the brush")
        page.page.wait_for_timeout(1000)
        paints = page.page.evaluate("() => window.__paints")
        followers = {"ecg-scores", "ecg-latent", "ecg-poincare", "ecg-signal", "ecg-rhythm"}
        assert followers <= {p["plot"] for p in paints}, paints
        assert not [p for p in paints if p["primary"]], [p for p in paints if p["primary"]]

        panned = page.page.evaluate(PANNED_PLANE_JS, "ecg-latent")
        assert panned["image_pixels_left_of_frame"] > 0 and panned["drawn_left_of_frame"] == 0, panned
        assert not page.errors, "\n".join(page.errors)
    finally:
        page.close()


# --------------------------------------------------------------------------- review tools
def test_poincare_brush_and_family_selection_filter_the_views(server, browser):
    page = Page(browser, server.url)
    try:
        page.wait_dashboard()
        total, rows = page.count(), page.rows()
        page.brush("poincare", 0.3, 0.6, top=0.2, bottom=0.8)
        page.wait_until(lambda: "RR before" in page.page.locator(".ecg-summary .ecg-muted").first.inner_text(),
                        "the Poincaré brush")
        page.wait_until(lambda: page.count() < total, "the Poincaré brush to narrow the selection")
        page.shot("poincare-brush.png")
        page.page.locator(".ecg-summary").first.scroll_into_view_if_needed()
        page.page.get_by_role("button", name="Clear selection").click()
        page.wait_until(lambda: page.count() == total, "the selection to clear")

        page.page.locator(".bk-tab", has_text="Families").first.click()
        family_rows = page.page.locator(".ecg-view-families .slick-row")
        family_rows.first.wait_for(timeout=UPDATE_S * 1000)
        second = family_rows.nth(1) if family_rows.count() > 1 else family_rows.first
        size = int(second.locator(".slick-cell.l1").inner_text().replace(",", ""))
        second.locator(".slick-cell.l0").click()
        page.wait_until(lambda: page.count() == size, f"the family's {size} beats to be selected")
        page.shot("families.png")
        assert page.rows() != rows or size == total
        assert not page.errors, "\n".join(page.errors)
    finally:
        page.close()


def _lengths_brushed(browser, server) -> Page:
    """A new page of ``server``'s dashboard with the beat-length histogram brushed from its 2nd to its
    99th percentile: most beats, premature ones (long intervals after them) included, so that the
    outlier table holds beats of clean quality (a noise beat is no outlier)."""
    server.wait_ready(READY_S)
    page = Page(browser, server.url)
    page.wait_dashboard()
    page.canvas_box("lengths")
    page.brush_values("lengths", *page.quantiles("lengths", 0.02, 0.99))
    return page


def test_a_later_visitor_gets_the_page_first_and_the_dashboard_once_it_is_shown(server, browser):
    """Once a server's first page is up, a visitor's page goes out without waiting for the ~400
    models of a dashboard (a line says it is being built), and the dashboard follows as soon as
    the page says it is ready, as a browser's does."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.bokeh_session import ProtocolSession

    page = Page(browser, server.url)        # the server's pages so far may all have been progress views
    try:
        page.wait_dashboard()
    finally:
        page.close()

    async def visit():
        session = ProtocolSession(server.url)
        opened = await session.open(UPDATE_S)
        try:
            return opened, len(session.doc.models), session.doc.get_model_by_name("ecg-signal") is not None
        finally:
            await session.close()

    with ThreadPoolExecutor(1) as thread:     # Playwright's sync API holds this thread's event loop
        opened, models, has_signal = thread.submit(lambda: asyncio.run(visit())).result()
    assert opened["models"] < 40 < 300 < models and has_signal, (opened, models)


def test_labels_show_in_the_table_survive_a_restart_and_export_to_wfdb(browser, tmp_path):
    import wfdb

    out = tmp_path / "runs"
    srv = Server([*APP_ARGS, "--out", str(out)], tmp_path / "server-1.log")
    try:
        page = _lengths_brushed(browser, srv)
        page.wait_until(lambda: page.rows() and "F" not in page.rows()[0].split(), "a selection")
        scope = page.page.locator(".bk-btn-group .bk-btn", has_text=re.compile("^Selection$")).first
        page.click_until(scope, lambda: "bk-active" in (scope.get_attribute("class") or ""),
                         "the selection scope chosen")
        page.page.get_by_role("button", name="F", exact=True).click()
        page.wait_until(lambda: all(r.split()[-1] == "F" for r in page.rows()), "the table to show the labels")
        labelled = [r.split()[0] for r in page.rows()]
        page.page.locator(".bk-tab", has_text="Strip").first.click()
        page.page.locator(".ecg-view-outliers .slick-row").first.locator(".slick-cell.l0").click()
        page.page.wait_for_timeout(1500)
        page.shot("strip.png")
        with page.page.expect_download() as download:
            page.page.get_by_role("button", name="WFDB (.rev)").click()
        target = tmp_path / "export" / download.value.suggested_filename
        target.parent.mkdir()
        download.value.save_as(target)
        assert not page.errors, "\n".join(page.errors)
        page.close()
    finally:
        srv.stop()

    from dashboard.labels import ReviewLabels

    saved = ReviewLabels(next((out / "labels").glob("*.sqlite")), 1.0).frame()
    ann = wfdb.rdann(str(target.with_suffix("")), "rev")
    assert ann.sample.tolist() == saved["sample"].tolist() and set(ann.symbol) == {"F"}

    again = Server([*APP_ARGS, "--out", str(out)], tmp_path / "server-2.log")   # a restart
    try:
        page = _lengths_brushed(browser, again)
        page.wait_until(lambda: [r.split()[0] for r in page.rows()] == labelled, "the same selection")
        assert all(r.split()[-1] == "F" for r in page.rows()), "labels survive a restart"
        page.close()
    finally:
        again.stop()


def test_archive_picker_switches_recordings_without_a_restart(browser, tmp_path):
    """A batch of two recordings, served with --archive: a click on a row opens one recording's
    dashboard, a click on the other row switches to it (no reload, no restart)."""
    import subprocess
    import sys

    from pipeline.synth import SynthConfig, synthesize, write_csv

    inputs = tmp_path / "in"
    inputs.mkdir()
    for name, seed, pvc in (("calm", 1, 0.0), ("ectopic", 2, 0.06)):
        write_csv(synthesize(SynthConfig(n_samples=100_000, seed=seed, pvc_fraction=pvc)), inputs / f"{name}.csv")
    out = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "pipeline", "batch", str(inputs), "--out", str(out), "--device", "cpu",
                           "--epochs", "2", "--workers", "1", "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]

    srv = Server(["--device", "cpu", "--archive", str(out)], tmp_path / "server.log")
    try:
        srv.wait_http(120)
        page = Page(browser, srv.url)
        rows = page.page.locator(".ecg-view-archive .slick-row")
        rows.first.wait_for(timeout=UPDATE_S * 1000)
        listed = [r.split() for r in rows.all_inner_texts()]
        assert sorted(r[0] for r in listed) == ["calm.csv", "ectopic.csv"]
        assert int(listed[0][3].replace(",", "")) >= int(listed[1][3].replace(",", "")), "most outliers first"
        page.shot("archive.png")
        for row, name in ((0, listed[0][0]), (1, listed[1][0])):
            rows.nth(row).locator(".slick-cell.l0").click()
            page.wait_until(lambda: page.page.get_by_text(f"input {name}").count() > 0, f"{name} to open")
            page.page.wait_for_selector(".ecg-dashboard", timeout=UPDATE_S * 1000)
        total = page.count()
        assert total > 50
        assert not page.errors, "\n".join(page.errors)
        page.close()
    finally:
        srv.stop()
