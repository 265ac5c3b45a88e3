"""One dashboard page in headless Chromium (Playwright, async), with real mouse gestures timed in
the page's own clock.

:file:`interaction_probe.js` is injected before the page's scripts: it records when the browser
dispatched each mouse-up, wheel and double-click, each change of the hidden selection-version
marker (which changes in the same server message as every view of a selection) and each new
picture of the recording, and when each was painted (two animation frames later). A gesture's
latency is the paint of its result minus the input event's timestamp, both ``performance.now()``
of the page: no clock is shared with Python.

See Also
--------
benchmarks.interaction : what is measured with these pages, and the report.
"""
from __future__ import annotations

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from dashboard.spec import LINKED, RENDERED_BY_BOARD, VIEWS

PROBE = Path(__file__).resolve().parent / "interaction_probe.js"
# The charts a page has drawn before it counts as populated: every one the board renders.
CHARTS = [name for name, view in VIEWS.items() if view.kind in RENDERED_BY_BOARD]
VIEWPORT = {"width": 1600, "height": 1250}
BRUSH_TYPE = "dashboard.charts.Brush"


# The view of the plot inside the card ``ecg-view-<name>`` (the first plot below it).
_PLOT_VIEW_JS = """(name) => {
    const views = Bokeh.documents[0].views_manager;
    const isPlot = (m) => m.x_range !== undefined && Array.isArray(m.renderers);
    const card = views.query_one(v => (v.model.css_classes || []).includes('ecg-view-' + name));
    let plot = null;
    const descend = (v) => { if (plot) return; if (isPlot(v.model)) { plot = v; return; }
                             for (const c of v.children()) descend(c); };
    descend(card);
    return plot;
}"""

# Each named linked chart's brush bounds in the page: its ``Brush`` model, an argument of the
# chart's selection-geometry callback.
_BRUSH_BOUNDS_JS = f"""(linked) => {{
    const out = {{}};
    for (const name of linked) {{
        const plot = ({_PLOT_VIEW_JS})(name).model;
        const callback = plot.js_event_callbacks['selectiongeometry'][0];
        const args = callback.args;
        const brush = args instanceof Map ? args.get('brush') : args.brush;
        out[name] = brush.bounds == null ? null : Array.from(brush.bounds);
    }}
    return out;
}}"""


class GestureError(RuntimeError):
    """A gesture whose result never showed (counted as a failed interaction)."""


@dataclass
class Gesture:
    """One timed gesture: ``latency_ms`` from the input event to the paint of its result."""

    kind: str
    latency_ms: float
    detail: dict = field(default_factory=dict)


async def launch(playwright):
    from tests.support.served import CHROMIUM, CHROMIUM_ARGS

    return await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


class BrowserPage:
    """One browser context and page of the dashboard, collecting console errors."""

    def __init__(self, context, page):
        self.context, self.page = context, page
        self._jitter = random.Random(0)
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    @classmethod
    async def new(cls, browser) -> "BrowserPage":
        context = await browser.new_context(viewport=VIEWPORT)
        await context.add_init_script(script=f"window.__ecgCharts = {json.dumps(CHARTS)};")
        await context.add_init_script(path=str(PROBE))
        return cls(context, await context.new_page())

    async def close(self) -> None:
        await self.context.close()

    # ------------------------------------------------------------------ opening
    async def open(self, url: str, timeout_s: float) -> dict:
        """Navigate and wait until every view is populated. Returns milliseconds since the navigation
        started: response, first paint, first contentful paint, the version marker, document idle,
        table rows, charts drawn, all populated and its paint."""
        await self.page.goto(url, wait_until="commit", timeout=timeout_s * 1000)
        await self.page.wait_for_function(
            "() => window.__ecgProbe && (window.__ecgProbe.milestones.populated_painted !== undefined"
            " || window.__ecgProbe.error !== undefined)", timeout=timeout_s * 1000, polling=100)
        timing = await self.page.evaluate("""() => {
            const nav = performance.getEntriesByType('navigation')[0] || {};
            const paint = Object.fromEntries(performance.getEntriesByType('paint').map(e => [e.name, e.startTime]));
            return {probe_error: window.__ecgProbe.error || null, response_start: nav.responseStart,
                    response_end: nav.responseEnd, dom_content_loaded: nav.domContentLoadedEventEnd,
                    first_paint: paint['first-paint'], first_contentful_paint: paint['first-contentful-paint'],
                    ...window.__ecgProbe.milestones};
        }""")
        if timing.get("probe_error"):
            raise GestureError(f"the page probe failed: {timing['probe_error']}")
        return timing

    # ------------------------------------------------------------------ reading the page
    async def probe(self, expression: str):
        return await self.page.evaluate(f"() => {{ const p = window.__ecgProbe; return {expression}; }}")

    async def x_range(self) -> tuple[float, float]:
        return tuple(await self.page.evaluate(
            "() => { const r = Bokeh.documents[0].get_model_by_name('ecg-signal').x_range; return [r.start, r.end]; }"))

    async def count(self, timeout_s: float = 10.0) -> int:
        """The selected-beat count the page shows ("N of T beats selected")."""
        deadline = time.perf_counter() + timeout_s
        while True:
            text = await self.page.locator(".ecg-count").first.inner_text()
            found = re.search(r"([\d,]+) of", text)
            if found:
                return int(found.group(1).replace(",", ""))
            if time.perf_counter() > deadline:
                raise GestureError(f"no selection count on the page (it shows {text!r})")
            await asyncio.sleep(0.1)

    async def brush_bounds(self) -> dict:
        """Each linked chart's brush as the page holds it (its ``Brush`` model, which the chart's box
        selection writes and the server reads): ``{view: bounds or None}``."""
        return await self.page.evaluate(_BRUSH_BOUNDS_JS, list(LINKED))

    async def _brush_moved(self, view: str, brushed, timeout_s: float = 1.0) -> bool:
        """Whether ``view``'s brush in the page left ``brushed`` within ``timeout_s``."""
        try:
            await self.page.wait_for_function(
                f"([name, was]) => JSON.stringify(({_BRUSH_BOUNDS_JS})([name])[name]) !== JSON.stringify(was)",
                arg=[view, brushed], timeout=timeout_s * 1000, polling="raf")
            return True
        except Exception:   # noqa: BLE001 - Playwright's TimeoutError
            return False

    async def canvas_box(self, view: str) -> dict:
        canvas = self.page.locator(f".ecg-view-{view} .bk-Canvas").first
        await canvas.scroll_into_view_if_needed()
        box = await canvas.bounding_box()
        if box is None:
            raise GestureError(f"the chart 'ecg-view-{view}' has no canvas on the page")
        return box

    # ------------------------------------------------------------------ gestures
    async def _versions(self) -> int:
        return await self.probe("p.versions.length")

    async def _wait_version_painted(self, before: int, input_types: tuple[str, ...], kind: str,
                                    timeout_s: float) -> Gesture:
        """The first version change after ``before`` changes, painted; latency from the last of
        ``input_types`` the page saw."""
        try:
            await self.page.wait_for_function(
                "(n) => { const v = window.__ecgProbe.versions; return v.length > n && v[n].painted !== null; }",
                arg=before, timeout=timeout_s * 1000, polling="raf")
        except Exception as err:   # noqa: BLE001 - Playwright's TimeoutError; report the gesture
            raise GestureError(f"{kind}: no repaint within {timeout_s:.0f} s") from err
        record, inputs = await self.page.evaluate(
            "(n) => [window.__ecgProbe.versions[n], window.__ecgProbe.input]", before)
        start = max(inputs.get(t) or 0 for t in input_types)
        return Gesture(kind, record["painted"] - start, {"version": record["version"],
                                                          "arrived_ms": record["at"] - start})

    async def frame_geometry(self, view: str, xs=(), ys=()) -> dict:
        """Where data values fall on a chart's canvas (CSS px from its top-left), by the plot's own
        scales, and its plot frame: ``{"sx": [...], "sy": [...], "frame": {x, y, width, height}}``."""
        return await self.page.evaluate(f"""([name, xs, ys]) => {{
            const frame = ({_PLOT_VIEW_JS})(name).frame;
            const box = frame.bbox;
            return {{sx: xs.map(x => frame.x_scale.compute(x)), sy: ys.map(y => frame.y_scale.compute(y)),
                    frame: {{x: box.x, y: box.y, width: box.width, height: box.height}}}};
        }}""", [view, list(xs), list(ys)])

    async def _drag(self, points: list[tuple[float, float]], pause_s: float = 0.016) -> None:
        """Press at the first point, move through the others (one move per ~frame, as a hand does),
        release at the last."""
        mouse = self.page.mouse
        await mouse.move(*points[0])
        await mouse.down()
        for point in points[1:]:
            await mouse.move(*point)
            await asyncio.sleep(pause_s)
        await mouse.up()

    async def brush(self, view: str, x: tuple[float, float], y: tuple[float, float] = (0.5, 0.5),
                    timeout_s: float = 60.0) -> Gesture:
        """Drag across fractions ``x`` (and ``y``, from the top: a box on the latent plane) of a
        linked chart's plot frame, as a user brushes what the chart shows; time mouse-up → every
        view repainted."""
        brushed = (await self.brush_bounds())[view]
        shifts = (0.0, 0.004, -0.004, 0.01, -0.01)
        for drags, shift in enumerate(shifts, start=1):
            # A drag that left the chart's brush as it was (one that gives the brush it has already,
            # or one the page missed while it was still laying itself out) repaints nothing: it is
            # made again, a few pixels aside, after a moment's pause.
            if drags > 1:
                await asyncio.sleep(0.25 * drags)
            box = await self.canvas_box(view)
            frame = (await self.frame_geometry(view))["frame"]
            x0, x1 = (box["x"] + frame["x"] + frame["width"] * (f + shift) for f in x)
            y0, y1 = (box["y"] + frame["y"] + frame["height"] * f for f in y)
            steps = 8
            points = [(x0 + (x1 - x0) * k / steps, y0 + (y1 - y0) * k / steps) for k in range(steps + 1)]
            before = await self._versions()
            await self._drag(points)
            if await self._brush_moved(view, brushed):
                break
        else:
            raise GestureError(f"brush {view}: {len(shifts)} drags left the chart's brush at {brushed}")
        gesture = await self._wait_version_painted(before, ("mouseup", "pointerup"), f"brush {view}", timeout_s)
        gesture.detail["drags"] = drags
        return gesture

    async def brush_values(self, view: str, x: tuple[float, float], y: tuple[float, float] | None = None,
                           timeout_s: float = 60.0) -> Gesture:
        """:meth:`brush` over the data range ``x`` (and ``y`` on a plane), kept inside the plot frame."""
        geometry = await self.frame_geometry(view, xs=x, ys=y or ())
        frame = geometry["frame"]

        def inside(fractions) -> tuple[float, float]:
            # A varied margin: two spans beyond the same edges must not give the same drag (it would
            # change nothing). At least 3 % wide: a drag, not a click.
            edge = 0.01 + 0.03 * self._jitter.random()
            lo, hi = sorted(min(max(f, edge), 1 - edge) for f in fractions)
            return (lo, max(hi, lo + 0.03)) if lo < 0.95 else (0.95, 0.98)

        fx = inside((sx - frame["x"]) / frame["width"] for sx in geometry["sx"])
        fy = inside((sy - frame["y"]) / frame["height"] for sy in geometry["sy"]) if y else (0.5, 0.5)
        return await self.brush(view, fx, fy, timeout_s=timeout_s)

    async def clear(self, view: str, timeout_s: float = 60.0) -> Gesture:
        """Double-click a chart (clears its brush); time the double-click → repaint."""
        box = await self.canvas_box(view)
        frame = (await self.frame_geometry(view))["frame"]
        before = await self._versions()
        await self.page.mouse.dblclick(box["x"] + frame["x"] + frame["width"] * 0.5,
                                       box["y"] + frame["y"] + frame["height"] * 0.5)
        return await self._wait_version_painted(before, ("dblclick",), "clear", timeout_s)

    async def open_families(self, timeout_s: float = 60.0) -> int:
        """Show the families panel's tab; the number of family rows it lists."""
        await self.page.locator(".bk-tab", has_text="Families").first.click()
        rows = self.page.locator(".ecg-view-families .slick-row")
        await rows.first.wait_for(timeout=timeout_s * 1000)
        return await rows.count()

    async def select_family(self, row: int, timeout_s: float = 60.0) -> Gesture:
        """Click a family's row in the families panel (:meth:`open_families` first); time the click
        → every view repainted with that family's beats selected."""
        cell = self.page.locator(".ecg-view-families .slick-row").nth(row).locator(".slick-cell.l0")
        await cell.scroll_into_view_if_needed()
        box = await cell.bounding_box()
        if box is None:
            raise GestureError(f"family row {row} is not on the page")
        before = await self._versions()
        await self.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        return await self._wait_version_painted(before, ("mouseup", "pointerup"), "select family", timeout_s)

    async def _wait_landing(self, kind: str, since_ms: float, end_ms: float, window: tuple[float, float],
                            timeout_s: float, tolerance: float) -> Gesture:
        """The first picture of the recording since ``since_ms`` (the gesture's first input) that shows
        ``window``, painted; timed from ``end_ms`` (its last input). A drag's last step can be answered
        before the mouse is released: that picture counts, and the user waited 0 ms for it."""
        match = """(l, lo, hi, tol) => l.painted !== null && (l.kind === 'raster'
                         ? Math.abs(l.x0 - lo) <= tol && Math.abs(l.x1 - hi) <= tol
                         : l.kind === 'samples' && l.x0 <= lo + tol && l.x1 >= hi - tol)"""
        try:
            await self.page.wait_for_function(f"""([t0, lo, hi, tol]) => window.__ecgProbe.landings.some(
                    l => l.at >= t0 && ({match})(l, lo, hi, tol))""",
                                              arg=[since_ms, window[0], window[1], tolerance],
                                              timeout=timeout_s * 1000, polling="raf")
        except Exception as err:   # noqa: BLE001
            raise GestureError(f"{kind}: the recording did not show [{window[0]:.3f}, {window[1]:.3f}] "
                               f"within {timeout_s:.0f} s") from err
        landing, pictures, updates = await self.page.evaluate(f"""([t0, t1, lo, hi, tol]) => {{
            const landing = window.__ecgProbe.landings.find(l => l.at >= t0 && ({match})(l, lo, hi, tol));
            return [landing, window.__ecgProbe.landings.filter(l => l.at >= t1).length,
                    window.__ecgProbe.versions.filter(v => v.at >= t0 && v.at <= landing.at).length];
        }}""", [since_ms, end_ms, window[0], window[1], tolerance])
        return Gesture(kind, max(landing["painted"] - end_ms, 0.0),
                       {"picture": landing["kind"], "span_s": window[1] - window[0],
                        "pictures_after_gesture": pictures, "arrived_ms": landing["at"] - end_ms,
                        "beat_view_updates_meanwhile": updates})

    async def wheel(self, at: float, notches: int, timeout_s: float = 60.0) -> Gesture | None:
        """Wheel-zoom the recording around fraction ``at`` of its width (notches > 0 zoom in, < 0
        out); time the last wheel event → the new window's picture painted. None when the window
        did not move (already at a bound)."""
        box = await self.canvas_box("signal")
        frame = (await self.frame_geometry("signal"))["frame"]
        before = await self.x_range()
        since = await self.probe("performance.now()")
        await self.page.mouse.move(box["x"] + frame["x"] + frame["width"] * at, box["y"] + frame["y"] + frame["height"] * 0.5)
        for _ in range(abs(notches)):
            await self.page.mouse.wheel(0, -100 if notches > 0 else 100)
            await asyncio.sleep(0.03)
        return await self._after_window_gesture("zoom (wheel)", "wheel", before, since, timeout_s)

    async def pan(self, by: float, timeout_s: float = 60.0) -> Gesture | None:
        """Drag the recording by fraction ``by`` of its width; time mouse-up → new window painted."""
        box = await self.canvas_box("signal")
        frame = (await self.frame_geometry("signal"))["frame"]
        before = await self.x_range()
        y = box["y"] + frame["y"] + frame["height"] * 0.5
        x0 = box["x"] + frame["x"] + frame["width"] * (0.5 - by / 2)
        x1 = box["x"] + frame["x"] + frame["width"] * (0.5 + by / 2)
        steps = 18                                   # ~0.3 s of a hand's drag at 60 moves per second
        since = await self.probe("performance.now()")
        await self._drag([(x0 + (x1 - x0) * k / steps, y) for k in range(steps + 1)])
        return await self._after_window_gesture("pan (drag)", "mouseup", before, since, timeout_s)

    async def _after_window_gesture(self, kind: str, input_type: str, before, since: float,
                                    timeout_s: float) -> Gesture | None:
        window = await self.x_range()
        tolerance = 1e-6 * (window[1] - window[0]) + 1e-9
        if all(abs(a - b) <= tolerance for a, b in zip(window, before)):   # at a bound: rounding moved it
            return None
        end = (await self.probe("p.input"))[input_type]
        return await self._wait_landing(kind, since, end, window, timeout_s, tolerance)

