"""The session harness of the dashboard benchmarks: one session driven two ways, and the gestures
they make: :class:`BrowserPage` (headless Chromium, real mouse gestures, timed in the page's clock
by ``interaction_probe.js`` from the input event to the paint of its result), and :func:`protocol_brush`
and :func:`protocol_zoom` (Bokeh's protocol, to the last patch of the answer). The third way, in this
process: ``benchmarks.server_side``.
"""
from __future__ import annotations

import asyncio
import html
import json
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dashboard.spec import LINKED, RENDERED_BY_BOARD, VIEWS
from pipeline.results import load_run
from tests.support.bokeh_session import SessionError
from tests.support.served import CHROMIUM, CHROMIUM_ARGS, ROOT

PROBE = Path(__file__).resolve().parent / "interaction_probe.js"
CHARTS = [name for name, view in VIEWS.items() if view.kind in RENDERED_BY_BOARD]  # drawn before "populated"
VIEWPORT = {"width": 1600, "height": 1250}
ALL_BRUSHES = {"all brushes": lambda kind: kind.startswith("brush")}   # a summary over every chart's brushes


# --------------------------------------------------------------------------- the run and the plans
def run_from_log(log: str):
    """The run a server's log names (``pipeline.results.RunResult``)."""
    found = re.search(r"ECG dashboard ready in [\d.]+ s \((?:cached run )?([^;)]+)", log)
    if not found:
        raise RuntimeError("the server's log does not name its run")
    path = Path(found.group(1))
    return load_run(path if path.is_absolute() else ROOT / path)


def run_beats(run):
    """A run's beats as the charts see them (the DataStore's columns, on the host): the counts' check."""
    from dashboard.shared_run import SharedRun

    return SharedRun.from_run(run, device="cpu", columns_device="cpu").beats


def expected_count(beats, brushes: dict) -> int:
    """Beats inside every brush (``{view: bounds or None}``), from the run's own table, ends included."""
    mask = np.ones(len(beats), dtype=bool)
    for view, bounds in brushes.items():
        for k, column in enumerate(VIEWS[view].brush if bounds else ()):
            lo, hi = sorted(bounds[2 * k:2 * k + 2])
            values = beats[column].to_numpy(dtype=np.float64)
            mask &= (values >= lo) & (values <= hi)
    return int(mask.sum())


def brush_bounds(beats, view: str, rng: np.random.Generator) -> list[float]:
    """A brush in data units: 5–50 % of the range between the 2nd and 98th percentiles of each column."""
    bounds = []
    for column in VIEWS[view].brush:
        lo, hi = np.nanquantile(beats[column].to_numpy(dtype=np.float64), [0.02, 0.98])  # the first beat: no RR
        width = rng.uniform(0.05, 0.5) * (hi - lo)
        start = rng.uniform(lo, hi - width)
        bounds += [float(start), float(start + width)]
    return bounds


def brush_span(view: str, beats, rng) -> dict:
    """A drag between two quantiles of each axis's column (0–45 %, 55–100 %): the four charts' brushes
    together still select some beats most of the time, as a user's do."""
    span = {}
    for axis, column in zip(("x", "y"), VIEWS[view].brush):
        quantiles = (rng.uniform(0.0, 0.45), rng.uniform(0.55, 1.0))
        span[axis] = tuple(float(v) for v in np.nanquantile(beats[column].to_numpy(dtype=np.float64), quantiles))
    return span


def zoom_plan(duration_s: float, n: int, rng: np.random.Generator) -> list[tuple[str, float, float]]:
    """``n`` windows of the recording: zooms in (down to raw samples), pans and zooms out."""
    plan, (lo, hi) = [], (0.0, duration_s)
    for i in range(n):
        span = hi - lo
        kind = ("zoom in", "pan", "zoom out")[i % 3] if span < 0.9 * duration_s else "zoom in"
        if kind == "zoom in":
            centre, span = rng.uniform(lo + 0.2 * span, hi - 0.2 * span), span * rng.uniform(0.05, 0.5)
        elif kind == "pan":
            centre = (lo + hi) / 2 + rng.choice([-1, 1]) * rng.uniform(0.2, 0.6) * span
        else:
            centre, span = (lo + hi) / 2, min(span * rng.uniform(2, 6), duration_s)
        span = max(span, 4.0)
        lo = float(np.clip(centre - span / 2, 0.0, duration_s - span))
        hi = lo + span
        plan.append((kind, lo, hi))
    return plan


def next_gesture(window, duration_s: float, step: int, rng) -> tuple[str, float]:
    """The next gesture that can move the recording's window: ``('wheel', notches > 0 in)`` or ``('pan', by)``."""
    lo, hi = window
    span = hi - lo
    if span > 0.8 * duration_s:
        return "wheel", int(rng.integers(3, 7))
    kind = ("wheel in", "pan", "wheel in", "pan", "wheel out", "pan")[step % 6]
    if kind == "wheel in" and span < 12:
        kind = "wheel out"
    if kind == "wheel in":
        return "wheel", int(rng.integers(3, 9))
    if kind == "wheel out":
        return "wheel", -int(rng.integers(2, 5))
    by = float(rng.uniform(0.15, 0.4))
    if lo < 0.6 * span:
        return "pan", -by            # drag left: later times come into view
    if hi > duration_s - 0.6 * span:
        return "pan", by
    return "pan", by if rng.random() < 0.5 else -by


async def brush_rounds(n: int, timed, brush, clear) -> None:
    """An untimed brush and clear of each linked chart, then ``n`` rounds of a brush on each, every chart
    cleared after every 10th round and the last; ``timed(kind, gesture)`` awaits each (kind None: untimed)."""
    for view in LINKED:
        await timed(None, brush(view))
        await timed(None, clear(view))
    for i in range(n):
        for view in LINKED:
            await timed(f"brush {view}", brush(view))
        for view in LINKED if i % 10 == 9 or i == n - 1 else ():
            await timed("clear", clear(view))


# --------------------------------------------------------------------------- over the protocol
async def protocol_brush(session, view: str, bounds, board: str = "bokeh") -> float:
    """A brush (a clear: ``bounds=None``) over the protocol, seconds to the last patch: ``Brush.bounds``,
    or on cuxfilter's charts the box selection's event."""
    before, sent = session.version, time.perf_counter()
    if board == "cuxfilter":
        if bounds is None:
            await session.send_event(session.reset(view))
        else:
            y = tuple(bounds[2:]) if len(bounds) == 4 else (0.0, 1.0)
            await session.send_event(session.selection_geometry(view, tuple(bounds[:2]), y))
    else:
        brush = session.brush_model(view)
        async with session.change():
            brush.bounds = bounds
    # cuxfilter's charts may answer in several patches: wait longer before calling the answer complete.
    quiet = 0.3 if board == "cuxfilter" else 0.1
    waited = await session.wait_for(lambda: session.version != before, sent, 60, quiet=quiet)
    return waited.last_at - sent


async def protocol_zoom(session, lo: float, hi: float) -> float:
    """The recording's window moved to [lo, hi]; seconds to the last patch (its raster or raw samples)."""
    x_range, raster = session.by_name("ecg-signal").x_range, session.by_name("ecg-raster")
    lines = next(r for r in session.by_name("ecg-signal").renderers if type(r.glyph).__name__ == "MultiLine")
    tol = 1e-6 * (hi - lo)

    def shown() -> bool:
        x, dw = raster.data.get("x", ()), raster.data.get("dw", ())   # no columns before the first raster
        if len(x) and abs(x[0] - lo) <= tol and abs(x[0] + dw[0] - hi) <= tol:
            return True
        ts = lines.data_source.data.get("t", ())
        t = ts[0] if len(ts) else []
        return len(t) > 0 and t[0] <= lo + tol and t[-1] >= hi - tol

    sent = time.perf_counter()
    async with session.change():
        x_range.update(start=lo, end=hi)
    return (await session.wait_for(shown, sent, 30, quiet=0.1)).last_at - sent


def shown_count(session) -> int:
    """The selected-beat count in a protocol session's summary ("<b>N</b> of T beats selected")."""
    for model in session.doc.models:
        text = getattr(model, "text", None)
        if isinstance(text, str) and "ecg-count" in text:
            found = re.search(r"<b>([\d,]+)</b> of", html.unescape(text))
            if found:
                return int(found.group(1).replace(",", ""))
    raise SessionError("no selection summary in the session's document")


# --------------------------------------------------------------------------- in Chromium
class GestureError(RuntimeError):
    """A gesture whose result never showed (counted as a failed interaction)."""


@dataclass
class Gesture:
    """One timed gesture: ``latency_ms`` from the input event to the paint of its result."""

    kind: str
    latency_ms: float


async def launch(playwright):
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

    async def open(self, url: str, timeout_s: float) -> dict:
        """Navigate until every view is populated; ms from the navigation to each milestone."""
        await self.page.goto(url, wait_until="commit", timeout=timeout_s * 1000)
        await self.page.wait_for_function(
            "() => window.__ecgProbe && (window.__ecgProbe.milestones.populated_painted !== undefined"
            " || window.__ecgProbe.error !== undefined)", timeout=timeout_s * 1000, polling=100)
        timing = await self.probe("p.opening()")
        if timing.get("probe_error"):
            raise GestureError(f"the page probe failed: {timing['probe_error']}")
        return timing

    async def probe(self, expression: str):
        return await self.page.evaluate(f"() => {{ const p = window.__ecgProbe; return {expression}; }}")

    async def x_range(self) -> tuple[float, float]:
        return tuple(await self.page.evaluate(
            "() => { const r = Bokeh.documents[0].get_model_by_name('ecg-signal').x_range; return [r.start, r.end]; }"))

    async def brush_bounds(self) -> dict:
        """Each linked chart's brush as the page holds it: ``{view: bounds or None}``."""
        return await self.probe(f"p.brushBounds({json.dumps(list(LINKED))})")

    async def canvas_box(self, view: str) -> dict:
        canvas = self.page.locator(f".ecg-view-{view} .bk-Canvas").first
        await canvas.scroll_into_view_if_needed()
        box = await canvas.bounding_box()
        if box is None:
            raise GestureError(f"the chart 'ecg-view-{view}' has no canvas on the page")
        return box

    async def frame_geometry(self, view: str, xs=(), ys=()) -> dict:
        """Where values fall on a chart's canvas (CSS px) and its frame: ``{"sx", "sy", "frame"}``."""
        return await self.page.evaluate("(a) => window.__ecgProbe.geometry(...a)", [view, list(xs), list(ys)])

    async def _at(self, view: str, *fractions: tuple[float, float]) -> list[tuple[float, float]]:
        """The page coordinates of fractions (fx, fy) of a chart's plot frame."""
        box, frame = await self.canvas_box(view), (await self.frame_geometry(view))["frame"]
        return [(box["x"] + frame["x"] + frame["width"] * fx, box["y"] + frame["y"] + frame["height"] * fy)
                for fx, fy in fractions]

    async def _painted(self, before: int, input_types: tuple[str, ...], kind: str, timeout_s: float) -> Gesture:
        """The version change after ``before`` changes, painted; timed from the last of ``input_types``."""
        try:
            painted = await self.page.wait_for_function(
                "(n) => { const p = window.__ecgProbe, v = p.versions; "
                "return v.length > n && v[n].painted !== null && [v[n], p.input]; }",
                arg=before, timeout=timeout_s * 1000, polling="raf")
        except Exception as err:   # noqa: BLE001 - Playwright's TimeoutError; report the gesture
            raise GestureError(f"{kind}: no repaint within {timeout_s:.0f} s") from err
        record, inputs = await painted.json_value()
        start = max(inputs.get(t) or 0 for t in input_types)
        return Gesture(kind, record["painted"] - start)

    async def _drag(self, points: list[tuple[float, float]], pause_s: float = 0.016) -> None:
        """Press at the first point, move through the others (one move a frame, as a hand does), release."""
        mouse = self.page.mouse
        await mouse.move(*points[0])
        await mouse.down()
        for point in points[1:]:
            await mouse.move(*point)
            await asyncio.sleep(pause_s)
        await mouse.up()

    async def brush(self, view: str, x: tuple[float, float], y: tuple[float, float] = (0.5, 0.5),
                    timeout_s: float = 120.0) -> Gesture:
        """Drag across fractions ``x`` (and ``y``) of a chart's frame; mouse-up → every view repainted. A
        drag that left the brush as it was (missed while the page laid itself out) is made again aside."""
        brushed = (await self.brush_bounds())[view]
        shifts = (0.0, 0.004, -0.004, 0.01, -0.01)
        for drags, shift in enumerate(shifts, start=1):
            if drags > 1:
                await asyncio.sleep(0.25 * drags)
            (x0, y0), (x1, y1) = await self._at(view, (x[0] + shift, y[0]), (x[1] + shift, y[1]))
            before = await self.probe("p.versions.length")
            await self._drag([(x0 + (x1 - x0) * k / 8, y0 + (y1 - y0) * k / 8) for k in range(9)])
            try:
                moved = "([n, was]) => JSON.stringify(window.__ecgProbe.brushBounds([n])[n]) !== JSON.stringify(was)"
                await self.page.wait_for_function(moved, arg=[view, brushed], timeout=1000, polling="raf")
                break
            except Exception:   # noqa: BLE001 - Playwright's TimeoutError: the brush did not move
                continue
        else:
            raise GestureError(f"brush {view}: {len(shifts)} drags left the chart's brush at {brushed}")
        return await self._painted(before, ("mouseup", "pointerup"), f"brush {view}", timeout_s)

    async def brush_values(self, view: str, x: tuple[float, float], y: tuple[float, float] | None = None,
                           timeout_s: float = 120.0) -> Gesture:
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

    async def clear(self, view: str, timeout_s: float = 120.0) -> Gesture:
        """Double-click a chart (clears its brush); time the double-click → repaint."""
        at = await self._at(view, (0.5, 0.5))
        before = await self.probe("p.versions.length")
        await self.page.mouse.dblclick(*at[0])
        return await self._painted(before, ("dblclick",), "clear", timeout_s)

    async def open_families(self, timeout_s: float = 120.0) -> int:
        """Show the families panel's tab; the number of family rows it lists."""
        await self.page.locator(".bk-tab", has_text="Families").first.click()
        rows = self.page.locator(".ecg-view-families .slick-row")
        await rows.first.wait_for(timeout=timeout_s * 1000)
        return await rows.count()

    async def select_family(self, row: int, timeout_s: float = 120.0) -> Gesture:
        """Click a family's row (:meth:`open_families` first); time the click → every view repainted."""
        cell = self.page.locator(".ecg-view-families .slick-row").nth(row).locator(".slick-cell.l0")
        await cell.scroll_into_view_if_needed()
        box = await cell.bounding_box()
        if box is None:
            raise GestureError(f"family row {row} is not on the page")
        before = await self.probe("p.versions.length")
        await self.page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        return await self._painted(before, ("mouseup", "pointerup"), "select family", timeout_s)

    async def wheel(self, at: float, notches: int, timeout_s: float = 120.0) -> Gesture | None:
        """Wheel-zoom the recording around fraction ``at`` of its width (notches > 0 zoom in); time
        the last wheel event → the new window's picture painted. None when the window did not move."""
        point, before = await self._at("signal", (at, 0.5)), await self.x_range()
        since = await self.probe("performance.now()")
        await self.page.mouse.move(*point[0])
        for _ in range(abs(notches)):
            await self.page.mouse.wheel(0, -100 if notches > 0 else 100)
            await asyncio.sleep(0.03)
        return await self._landed("zoom (wheel)", "wheel", before, since, timeout_s)

    async def pan(self, by: float, timeout_s: float = 120.0) -> Gesture | None:
        """Drag the recording by fraction ``by`` of its width; time mouse-up → new window painted."""
        (x0, y), (x1, _) = await self._at("signal", (0.5 - by / 2, 0.5), (0.5 + by / 2, 0.5))
        before, since = await self.x_range(), await self.probe("performance.now()")
        await self._drag([(x0 + (x1 - x0) * k / 18, y) for k in range(19)])   # ~0.3 s of a hand's drag
        return await self._landed("pan (drag)", "mouseup", before, since, timeout_s)

    async def _landed(self, kind: str, input_type: str, before, since_ms: float, timeout_s: float) -> Gesture | None:
        """The first picture since the gesture began that shows the new window, painted; timed from its
        last input (a drag answered before the mouse is released counts, at 0 ms)."""
        window = await self.x_range()
        tol = 1e-6 * (window[1] - window[0]) + 1e-9
        if all(abs(a - b) <= tol for a, b in zip(window, before)):   # at a bound: rounding moved it
            return None
        end_ms = (await self.probe("p.input"))[input_type]
        match = """(l, lo, hi, tol) => l.painted !== null && (l.kind === 'raster'
                         ? Math.abs(l.x0 - lo) <= tol && Math.abs(l.x1 - hi) <= tol
                         : l.kind === 'samples' && l.x0 <= lo + tol && l.x1 >= hi - tol)"""
        try:
            landing = await self.page.wait_for_function(f"""([t0, lo, hi, tol]) => window.__ecgProbe.landings.find(
                    l => l.at >= t0 && ({match})(l, lo, hi, tol))""", arg=[since_ms, window[0], window[1], tol],
                                                        timeout=timeout_s * 1000, polling="raf")
        except Exception as err:   # noqa: BLE001
            raise GestureError(f"{kind}: the recording did not show [{window[0]:.3f}, {window[1]:.3f}] "
                               f"within {timeout_s:.0f} s") from err
        return Gesture(kind, max((await landing.json_value())["painted"] - end_ms, 0.0))
