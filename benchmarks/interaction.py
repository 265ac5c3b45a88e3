"""Interaction benchmark: the dashboard as a user feels it, in headless Chromium against a real server.

    python -m benchmarks.interaction                      # 2M samples on the CPU, every single-session part
    python -m benchmarks.interaction --sessions 20        # + 20 concurrent sessions brushing (load test)
    python -m benchmarks.interaction --soak 200           # + 200 sessions opened and closed (server memory)
    python -m benchmarks.interaction --quick --out /tmp/b # tiny run (the smoke test)
    python -m benchmarks.interaction --client bokeh --sessions 20   # load test without a browser

It starts ``panel serve dashboard/app.py`` (run cache in ``--runs``; a cached run is reused) and
measures, each kind warmed up and then repeated:

1. **session open** over several fresh browser contexts: navigation → first paint (the paint
   timing API) → every view populated (the selection-version marker exists, the Bokeh document
   is idle, every chart the board draws has drawn and the outlier table shows rows), and its paint;
2. **brushes**: ``--brushes`` real mouse drags on each linked chart (varied ranges where the beats
   are, so that the four brushes together still select some: :func:`brush_span`; a double-click
   clears now and then), each from the mouse-up to every affected view repainted (the version
   marker changed, then two animation frames), and how many beats each left selected;
3. **zoom/pan**: ``--gestures`` wheel zooms and drags of the recording, each from the last wheel
   event or the mouse-up to the picture of the new window painted (a Datashader raster, or the raw
   samples of a deep zoom);
4. **server side**, in this process on the same run: each interaction from the property change
   the browser sends to the document patch serialized (:mod:`benchmarks.inprocess`);
5. with ``--sessions N``, N concurrent sessions: every one brushes once at the same instant (the
   burst, reported apart), then ``--load-brushes`` times each after a user's pause (bounded by
   ``--load-timeout``): p95 against one session doing the same and (protocol sessions) against
   the same sessions' brushes made one session at a time, console errors, failed gestures,
   and whether each session's selection count is what its own brushes select; each part starts
   once the sessions closed before it are discarded (:meth:`tests.support.served.Server.discard_s`);
6. with ``--soak N``, N sessions opened (bokeh protocol), brushed once and closed, the server's
   resident memory after every 10.

The soak test has a server of its own with ``--check-unused-sessions`` /
``--unused-session-lifetime`` of 1 s, so that closed sessions are discarded within seconds (Bokeh's
defaults keep them 15 s); the other parts run on a server with Bokeh's defaults.

Results: ``--out/interaction-<machine>-<date>.{json,md}`` (rewritten after each part), and a table.
Not a test; ``tests/test_benchmarks.py`` runs ``--quick`` as a smoke test.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.metadata
import importlib.util
import json
import math
import os
import re
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import stats  # noqa: E402
from benchmarks.inprocess import LINKED, run_beats  # noqa: E402
from benchmarks.measure import python_loop_ms  # noqa: E402
from tests.support.served import CHROMIUM, Server, chromium_version  # noqa: E402

# The soak test's server discards closed sessions after 1 s (Bokeh's default keeps them 15 s). Only
# that server: a browser page's session is "unused" from the HTTP request that creates it until its
# websocket connects, which takes seconds when 20 pages load at once, so a 1 s lifetime would discard
# sessions that are still loading.
SESSION_LIFETIME_MS = 1000
SOAK_SERVE_ARGS = ["--check-unused-sessions", str(SESSION_LIFETIME_MS),
                   "--unused-session-lifetime", str(SESSION_LIFETIME_MS)]
QUICK = dict(samples=300_000, epochs=3, brushes=3, gestures=4, opens=2, server_n=5, load_brushes=3)
# Targets of the 2-core CPU machine, 2M samples (the table).
TARGETS_CPU = {"brush_p95_ms": 100.0, "zoom_p95_ms": 400.0, "first_paint_ms": 1500.0, "populated_ms": 4000.0,
               "load_ratio": 2.0, "soak_growth": 0.05}


# --------------------------------------------------------------------------- arguments
def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.interaction", description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, help="synthetic recording length (default: the device's, 2M on a CPU)")
    p.add_argument("--epochs", type=int, help="VAE epochs of the run (default: the pipeline's)")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu", "auto"))
    p.add_argument("--input", help="a recording instead of the synthetic default")
    p.add_argument("--brushes", type=int, default=50, help="timed brushes on each linked chart (default 50)")
    p.add_argument("--gestures", type=int, default=24, help="timed zoom/pan gestures on the recording (default 24)")
    p.add_argument("--opens", type=int, default=5, help="timed session opens, each in a fresh context (default 5)")
    p.add_argument("--server-n", type=int, default=50, help="server-side repeats per interaction kind (default 50)")
    p.add_argument("--sessions", type=int, default=0, help="load test: concurrent sessions (e.g. 20; default off)")
    p.add_argument("--load-brushes", type=int, default=10, help="brushes per session in the load test (default 10)")
    p.add_argument("--load-timeout", type=float, default=420, help="seconds the whole load test may take")
    p.add_argument("--soak", type=int, default=0, help="soak test: sessions opened and closed (e.g. 200; default off)")
    p.add_argument("--client", choices=("browser", "bokeh"), default=None,
                   help="what drives the load test: Chromium (default when installed) or bokeh protocol sessions")
    p.add_argument("--parts", default="open,brush,zoom,server",
                   help="single-session parts to run (comma-separated of open, brush, zoom, server; 'none' for none)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke test): " + ", ".join(
        f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--serve-arg", action="append", default=[], metavar="OPTION",
                   help="an extra `panel serve` option for the main server, e.g. "
                        "--serve-arg=--unused-session-lifetime=300000 (repeatable; default: as ./run.sh serves)")
    p.add_argument("--label", help="appended to the results' file name (a variant kept beside the main results)")
    p.add_argument("--merge", action="store_true",
                   help="keep the other sections of today's results file and replace only those measured now")
    p.add_argument("--runs", default="runs", help="run cache folder (default runs; a cached run is reused)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder for the JSON and Markdown")
    p.add_argument("--ready-timeout", type=float, default=1800, help="seconds for the server's run to be ready")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if key in ("samples", "epochs"):
                setattr(args, key, getattr(args, key) or value)
            elif getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
    for name in ("brushes", "gestures", "opens", "server_n", "load_brushes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1; got {getattr(args, name)}")
    if args.sessions < 0 or args.soak < 0:
        p.error("--sessions and --soak must be >= 0")
    parts = set() if args.parts == "none" else {x.strip() for x in args.parts.split(",") if x.strip()}
    unknown = parts - {"open", "brush", "zoom", "server"}
    if unknown:
        p.error(f"--parts: unknown {', '.join(sorted(unknown))} (known: open, brush, zoom, server, none)")
    args.parts = parts
    if args.label and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", args.label):
        p.error(f"--label must be letters, digits, '.', '_' or '-'; got {args.label!r}")
    has_browser = Path(CHROMIUM).exists() and importlib.util.find_spec("playwright") is not None
    args.client = args.client or ("browser" if has_browser else "bokeh")
    if (args.client == "browser" or parts & {"open", "brush", "zoom"}) and not has_browser:
        p.error(f"{CHROMIUM} or playwright is missing: use --client bokeh --parts server (or none)")
    return args


def app_args(args) -> list[str]:
    out = ["--device", args.device, "--out", args.runs]
    for name in ("samples", "epochs", "input"):
        if getattr(args, name):
            out += [f"--{name}", str(getattr(args, name))]
    return out


# --------------------------------------------------------------------------- the machine
class LoadWatch:
    """The 1-minute load average every few seconds while the benchmark runs (other work on the machine)."""

    def __init__(self, every_s: float = 5.0):
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def _run(self, every_s):
        while not self._stop.is_set():
            self.samples.append((round(time.perf_counter() - self._started, 1), round(os.getloadavg()[0], 2)))
            self._stop.wait(every_s)

    def stop(self) -> dict:
        self._stop.set()
        return self.snapshot()

    def mark(self) -> int:
        """A point to summarise from (see :meth:`snapshot`)."""
        return len(self.samples)

    def snapshot(self, since: int = 0) -> dict:
        samples = self.samples[since:] or self.samples[-1:]
        loads = [x for _, x in samples]
        return {"one_minute_samples": samples, "mean": round(float(np.mean(loads)), 2) if loads else None,
                "max": max(loads) if loads else None}


def machine() -> dict:
    from benchmarks.measure import describe_machine, machine_name

    info = describe_machine(gpu=False)
    for name in ("panel", "bokeh", "holoviews", "datashader", "playwright", "tornado"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            info["versions"][name] = importlib.metadata.version(name)
    info["chromium"] = chromium_version()
    info["name"] = machine_name(info)
    return info


# --------------------------------------------------------------------------- the run's beats
def run_path_from_log(log: str) -> Path:
    found = re.search(r"ECG dashboard ready in [\d.]+ s \((?:cached run )?([^;)]+)", log)
    if not found:
        raise RuntimeError("the server's log does not name its run")
    path = Path(found.group(1))
    return path if path.is_absolute() else ROOT / path


def expected_count(beats, brushes: dict) -> int:
    """Beats inside every brush, computed from the run's own table (float64, ends included), as an
    independent check of the count a session shows. ``brushes``: ``{view: bounds or None}``."""
    from dashboard.spec import VIEWS

    mask = np.ones(len(beats), dtype=bool)
    for view, bounds in brushes.items():
        if not bounds:
            continue
        for k, column in enumerate(VIEWS[view].brush):
            lo, hi = sorted(bounds[2 * k:2 * k + 2])
            values = beats[column].to_numpy(dtype=np.float64)
            mask &= (values >= lo) & (values <= hi)
    return int(mask.sum())


# --------------------------------------------------------------------------- browser parts
def brush_fractions(view: str, rng) -> dict:
    """A varied drag over a linked chart, as fractions of its plot frame: 5–40 % of its width
    (and 10–40 % of its height on a plane), anywhere in it."""
    from dashboard.spec import VIEWS

    width = rng.uniform(0.05, 0.4)
    start = rng.uniform(0.03, 0.97 - width)
    out = {"x": (start, start + width)}
    if len(VIEWS[view].brush) == 2:
        height = rng.uniform(0.1, 0.4)
        top = rng.uniform(0.03, 0.97 - height)
        out["y"] = (top, top + height)
    return out


async def measure_opens(browser, url: str, n: int, timeout_s: float) -> dict:
    from benchmarks.browser_session import BrowserPage

    timings, errors = [], []
    for i in range(n + 1):                      # the first one warms the server's and browser's paths up
        page = await BrowserPage.new(browser)
        try:
            timing = await page.open(url, timeout_s)
            if i:
                timings.append(timing)
            errors += page.errors
        finally:
            await page.close()
    keys = {"first_paint": "first paint", "first_contentful_paint": "first contentful paint",
            "response_end": "page loaded (HTTP)", "marker": "version marker", "idle": "document idle",
            "charts": "charts drawn", "table": "table rows", "populated": "every view populated",
            "populated_painted": "every view populated, painted"}
    return {"milestones_ms": {label: stats.summary([t[k] for t in timings if t.get(k) is not None])
                              for k, label in keys.items()},
            "per_open": timings, "console_errors": errors}


def brush_span(view: str, beats, rng) -> dict:
    """A drag where the chart shows beats, in data units: between two quantiles of the chart's
    column (each axis of a plane), the lower drawn from 0–45 %, the upper from 55–100 %. One chart
    alone then selects 10–100 % of the beats, and the four charts' brushes together still select
    some most of the time, as a user's do; drags anywhere in a chart (:func:`brush_fractions`) left
    the four brushes' intersection empty after the first round (no markers, an empty table)."""
    from dashboard.spec import VIEWS

    span = {}
    for axis, column in zip(("x", "y"), VIEWS[view].brush):
        quantiles = (rng.uniform(0.0, 0.45), rng.uniform(0.55, 1.0))
        span[axis] = tuple(float(v) for v in np.nanquantile(beats[column].to_numpy(dtype=np.float64), quantiles))
    return span


async def measure_brushes(page, beats, n: int, rng, timeout_s: float) -> tuple[dict, list, list]:
    """``n`` brushes on each linked chart (interleaved, ranges where the beats are), a double-click
    clear of each every 10th round and after the last; then ``n // 5`` clicks on a family's row (the
    families panel's selection, the other way a beat view filters every view). Also returns the
    number of beats each timed brush left selected."""
    from benchmarks.browser_session import GestureError

    samples: dict[str, list] = {}
    failures, selected = [], []
    for view in LINKED:                                   # untimed warm-up of each chart's path
        await page.brush(view, **brush_fractions(view, rng), timeout_s=timeout_s)
        await page.clear(view, timeout_s=timeout_s)
    for i in range(n):
        for view in LINKED:
            try:
                g = await page.brush_values(view, **brush_span(view, beats, rng), timeout_s=timeout_s)
                samples.setdefault(g.kind, []).append(g.latency_ms)
                selected.append(await page.count())
            except GestureError as err:
                failures.append(str(err))
            await asyncio.sleep(0.1)
        if i % 10 == 9 or i == n - 1:
            for view in LINKED:
                try:
                    g = await page.clear(view, timeout_s=timeout_s)
                    samples.setdefault(g.kind, []).append(g.latency_ms)
                except GestureError as err:
                    failures.append(str(err))
                await asyncio.sleep(0.1)
    families = await page.open_families(timeout_s)
    for i in range(max(n // 5, 1) + 1):                    # the first click is an untimed warm-up
        try:
            g = await page.select_family(i % families, timeout_s=timeout_s)
            if i:
                samples.setdefault(g.kind, []).append(g.latency_ms)
        except GestureError as err:
            failures.append(str(err))
        await asyncio.sleep(0.1)
    return samples, failures, selected


def next_gesture(window, duration_s: float, step: int, rng) -> tuple[str, float]:
    """The next zoom/pan gesture for the recording's current window: ``('wheel', notches)`` (> 0 in)
    or ``('pan', fraction of the width)``, chosen so that the window can move that way."""
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


async def measure_gestures(page, n: int, duration_s: float, rng, timeout_s: float) -> tuple[dict, list, list]:
    from benchmarks.browser_session import GestureError

    samples: dict[str, list] = {}
    failures, details = [], []
    for _ in range(2):                                    # untimed warm-up: a zoom in and back out
        await page.wheel(0.5, 4, timeout_s=timeout_s)
        await page.wheel(0.5, -4, timeout_s=timeout_s)
    step = attempts = 0
    while len(details) < n and attempts < 4 * n:
        attempts += 1
        kind, amount = next_gesture(await page.x_range(), duration_s, step, rng)
        step += 1
        try:
            if kind == "wheel":
                g = await page.wheel(float(rng.uniform(0.3, 0.7)), int(amount), timeout_s=timeout_s)
            else:
                g = await page.pan(amount, timeout_s=timeout_s)
        except GestureError as err:
            failures.append(str(err))
            continue
        if g is None:                                     # the window could not move that way
            continue
        samples.setdefault(g.kind, []).append(g.latency_ms)
        details.append({"kind": g.kind, "latency_ms": round(g.latency_ms, 1), **g.detail})
        await asyncio.sleep(0.15)
    return samples, failures, details


async def browser_parts(args, server, beats, report: dict, save) -> None:
    from playwright.async_api import async_playwright

    from benchmarks.browser_session import BrowserPage, launch

    rng = np.random.default_rng(args.seed)
    timeout_s = 120.0
    async with async_playwright() as pw:
        browser = await launch(pw)
        try:
            section = report.setdefault("browser", {})
            if "open" in args.parts:
                print(f"session open × {args.opens} (fresh browser contexts)…", flush=True)
                section["session open"] = await measure_opens(browser, server.url, args.opens, timeout_s)
                save()
            if {"brush", "zoom"} & args.parts:
                page = await BrowserPage.new(browser)
                try:
                    await page.open(server.url, timeout_s)
                    if "brush" in args.parts:
                        print(f"brushes × {args.brushes} on each of {', '.join(LINKED)}…", flush=True)
                        samples, failures, selected = await measure_brushes(page, beats, args.brushes, rng,
                                                                            timeout_s)
                        section["brushes"] = {kind: stats.summary(v) for kind, v in samples.items()}
                        section["brush_selected_beats"] = {"median": float(np.median(selected)) if selected else None,
                                                           "empty": sum(1 for c in selected if c == 0),
                                                           "n": len(selected), "of": len(beats)}
                        section["brushes"]["all brushes"] = stats.summary(
                            [x for kind, v in samples.items() if kind.startswith("brush") for x in v])
                        section["brush_failures"] = failures
                        save()
                    if "zoom" in args.parts:
                        print(f"zoom/pan gestures × {args.gestures} on the recording…", flush=True)
                        duration = report["run"]["duration_s"]
                        samples, failures, details = await measure_gestures(page, args.gestures, duration, rng,
                                                                            timeout_s)
                        section["zoom"] = {kind: stats.summary(v) for kind, v in samples.items()}
                        section["zoom"]["all zoom/pan"] = stats.summary([x for v in samples.values() for x in v])
                        section["zoom_failures"] = failures
                        section["zoom_gestures"] = details
                        save()
                    section["console_errors"] = page.errors
                finally:
                    await page.close()
        finally:
            await browser.close()


# --------------------------------------------------------------------------- server side
def server_part(args, report: dict, save) -> None:
    from benchmarks import inprocess

    print(f"server side × {args.server_n} per kind (in this process, same run)…", flush=True)
    _, shared = inprocess.load_shared(app_args(args))
    result = inprocess.measure(shared, args.server_n, max(args.server_n // 2, 10), n_sessions=max(args.opens, 3),
                               seed=args.seed)
    report["server"] = {"board": result["board"],
                        "kinds": {kind: stats.summary([s * 1000 for s in v]) for kind, v in result["seconds"].items()},
                        "details": result["details"]}
    save()


# --------------------------------------------------------------------------- load test
async def load_browser(args, server, beats, n_sessions: int, rng_seed: int) -> dict:
    """``n_sessions`` browser contexts at once, each brushing ``--load-brushes`` times."""
    from playwright.async_api import async_playwright

    from benchmarks.browser_session import BrowserPage, GestureError, launch

    timeout_s = 120.0
    async with async_playwright() as pw:
        browser = await launch(pw)
        pages = [await BrowserPage.new(browser) for _ in range(n_sessions)]
        opened = time.perf_counter()
        try:
            opens = await asyncio.gather(*(p.open(server.url, args.load_timeout) for p in pages),
                                         return_exceptions=True)
            open_failures = [f"{type(o).__name__}: {o}" for o in opens if isinstance(o, BaseException)]
            open_s = time.perf_counter() - opened
            latencies, burst, failures = [], [], list(open_failures)
            mine: list[dict] = [{} for _ in pages]          # what each session itself brushed last, per chart

            async def brushing(k: int, page) -> None:
                rng = np.random.default_rng([rng_seed, k])
                view = LINKED[k % len(LINKED)]     # one chart per session: its count stays informative
                for i in range(args.load_brushes + 1):     # 0: the burst, every session at once
                    try:
                        g = await page.brush(view, **brush_fractions(view, rng), timeout_s=timeout_s)
                        (latencies if i else burst).append(g.latency_ms)
                    except GestureError as err:
                        failures.append(f"session {k}: {err}")
                    await asyncio.sleep(float(rng.uniform(0.2, 0.8)))   # a user looks before brushing again

            live = [(k, p) for k, (p, o) in enumerate(zip(pages, opens)) if not isinstance(o, BaseException)]
            started = time.perf_counter()
            try:
                await asyncio.wait_for(asyncio.gather(*(brushing(k, p) for k, p in live)),
                                       max(args.load_timeout - open_s, 30))
            except asyncio.TimeoutError:
                failures.append(f"the load test passed its {args.load_timeout:.0f} s bound; stopped")
            brushing_s = time.perf_counter() - started
            await asyncio.sleep(1.0)
            independent, mismatches = 0, []
            for k, page in live:
                try:
                    brushes = await page.brush_bounds()
                    shown, want = await page.count(), expected_count(beats, brushes)
                except Exception as err:   # noqa: BLE001
                    mismatches.append(f"session {k}: could not read its selection: {err}")
                    continue
                mine[k] = {"brushes": brushes, "count": shown}
                if shown == want:
                    independent += 1
                else:
                    mismatches.append(f"session {k}: shows {shown} beats, its own brushes select {want}")
            errors = [f"session {k}: {e}" for k, p in enumerate(pages) for e in p.errors]
        finally:
            for page in pages:
                with contextlib.suppress(Exception):
                    await page.close()
            await browser.close()
    return {"client": "browser", "sessions": n_sessions, "opened": len(live), "open_all_s": round(open_s, 2),
            "brushing_s": round(brushing_s, 2), "brush_ms": stats.summary(latencies), "burst_ms": stats.summary(burst),
            "failed_interactions": failures,
            "console_errors": errors, "independent_sessions": independent, "selection_mismatches": mismatches,
            **count_spread([m.get("count") for m in mine]), "selections": mine}


def count_spread(counts: list) -> dict:
    """How telling the independence check was: sessions whose selection is not empty, distinct counts."""
    counts = [c for c in counts if c is not None]
    return {"nonzero_counts": sum(1 for c in counts if c > 0), "distinct_counts": len(set(counts))}


async def load_client(args, server, beats, n_sessions: int, rng_seed: int, in_turn: bool = False) -> dict:
    """The load test through bokeh protocol sessions (no browser): a brush is the Brush model's
    bounds sent; its latency, until the last patch of the answer arrived. ``in_turn``: the same
    sessions and brushes, one session brushing at a time (the load's reference without the load)."""
    from benchmarks import inprocess
    from tests.support.bokeh_session import ProtocolSession, SessionError

    sessions = [ProtocolSession(server.url) for _ in range(n_sessions)]
    opened = time.perf_counter()
    opens = await asyncio.gather(*(s.open(args.load_timeout) for s in sessions), return_exceptions=True)
    open_s = time.perf_counter() - opened
    failures = [f"{type(o).__name__}: {o}" for o in opens if isinstance(o, BaseException)]
    live = [(k, s) for k, (s, o) in enumerate(zip(sessions, opens)) if not isinstance(o, BaseException)]
    latencies: list[float] = []
    burst: list[float] = []
    mine: list[dict] = [{} for _ in sessions]
    turn = asyncio.Lock() if in_turn else contextlib.nullcontext()

    async def brushing(k: int, session) -> None:
        async with turn:
            await brushes_of(k, session)

    async def brushes_of(k: int, session) -> None:
        rng = np.random.default_rng([rng_seed, k])
        view = LINKED[k % len(LINKED)]             # one chart per session: its count stays informative
        for i in range(args.load_brushes + 1):     # 0: the burst, every session at once
            bounds = inprocess.brush_bounds(beats, view, rng)
            try:
                (latencies if i else burst).append(await brush_over_protocol(session, view, bounds, 60.0))
                mine[k][view] = bounds
            except SessionError as err:
                failures.append(f"session {k}: {err}")
            await asyncio.sleep(float(rng.uniform(0.2, 0.8)))

    for _, session in live:
        session.defer_patches()
    started = time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.gather(*(brushing(k, s) for k, s in live)), max(args.load_timeout - open_s, 30))
    except asyncio.TimeoutError:
        failures.append(f"the load test passed its {args.load_timeout:.0f} s bound; stopped")
    brushing_s = time.perf_counter() - started
    await asyncio.sleep(1.0)
    for _, session in live:
        session.apply_deferred()
    independent, mismatches = 0, []
    counts = []
    for k, session in live:
        shown, want = shown_count(session), expected_count(beats, mine[k])
        counts.append(shown)
        if shown == want:
            independent += 1
        else:
            mismatches.append(f"session {k}: shows {shown} beats, its own brushes select {want}")
    errors = [f"session {k}: {e}" for k, s in enumerate(sessions) for e in s.errors]
    for s in sessions:
        await s.close()
    return {"client": "bokeh protocol", "sessions": n_sessions, "opened": len(live), "open_all_s": round(open_s, 2),
            "brushing_s": round(brushing_s, 2), "brush_ms": stats.summary(latencies), "burst_ms": stats.summary(burst),
            "failed_interactions": failures,
            "console_errors": errors, "independent_sessions": independent, "selection_mismatches": mismatches,
            **count_spread(counts)}


async def brush_over_protocol(session, view: str, bounds: list[float], timeout_s: float) -> float:
    """Set a chart's Brush over the protocol; ms from sending it to the last patch of the answer."""
    brush = session.brush_model(view)
    before = session.version
    sent = time.perf_counter()
    async with session.change():
        brush.bounds = bounds
    waited = await session.wait_for(lambda: session.version != before, sent, timeout_s)
    return (waited.last_at - sent) * 1000


def shown_count(session) -> int:
    """The selected-beat count in a protocol session's summary pane ("<b>N</b> of T beats selected";
    Panel sends an HTML pane's text escaped)."""
    import html

    for model in session.doc.models:
        text = getattr(model, "text", None)
        if isinstance(text, str) and "ecg-count" in text:
            found = re.search(r"<b>([\d,]+)</b> of", html.unescape(text))
            if found:
                return int(found.group(1).replace(",", ""))
    raise RuntimeError("no selection summary in the session's document")


def load_part(args, server, beats, report: dict, save) -> None:
    runner = load_browser if args.client == "browser" else load_client
    print(f"load test: 1 session, then {args.sessions} at once, a burst and {args.load_brushes} brushes each "
          f"({args.client}), each after the sessions closed before it are discarded…", flush=True)
    # Each part starts once the sessions closed before it are discarded (--quick does not wait): their
    # discard pauses the server (a full garbage collection), a session's end rather than a brush's cost.
    wait_s = 0.0 if args.quick else server.discard_s()
    time.sleep(wait_s)
    single = asyncio.run(runner(args, server, beats, 1, args.seed + 1))
    time.sleep(wait_s)
    in_turn = None
    if runner is load_client:
        # The load's own reference: its sessions and brushes (the same seed), one session brushing
        # at a time. One session's few brushes of one chart make a noisy p95 of one chart's cost.
        in_turn = asyncio.run(load_client(args, server, beats, args.sessions, args.seed + 2, in_turn=True))
        time.sleep(wait_s)
    many = asyncio.run(runner(args, server, beats, args.sessions, args.seed + 2))
    report["load"] = {"single": single, "in_turn": in_turn, "concurrent": many,
                      "p95_ratio": stats.p95_ratio(many["brush_ms"], single["brush_ms"]),
                      "p95_ratio_in_turn": stats.p95_ratio(many["brush_ms"], in_turn and in_turn["brush_ms"]),
                      "waited_for_discards_s": wait_s}
    save()


# --------------------------------------------------------------------------- soak test
async def soak(args, server, beats) -> dict:
    """Open, brush once and close ``--soak`` protocol sessions one after another; the server's RSS
    after every 10, once the closed sessions had time to be discarded."""
    from benchmarks import inprocess
    from tests.support.bokeh_session import ProtocolSession

    rng = np.random.default_rng(args.seed + 3)
    rss, failures = [], []
    settle = 2 * SESSION_LIFETIME_MS / 1000 + 1.0
    rss.append({"sessions": 0, "rss_bytes": server.rss_bytes()})
    started = time.perf_counter()
    for i in range(1, args.soak + 1):
        check_alive(server, f"the soak, before cycle {i}")
        session = ProtocolSession(server.url)
        try:
            await session.open(120)
            view = LINKED[i % len(LINKED)]
            await brush_over_protocol(session, view, inprocess.brush_bounds(beats, view, rng), 60.0)
        except Exception as err:   # noqa: BLE001 - a failed cycle is a result of the soak
            failures.append(f"cycle {i}: {type(err).__name__}: {err}")
        finally:
            await session.close()
        if i % 10 == 0:
            await asyncio.sleep(settle)
            check_alive(server, f"the soak, after cycle {i}")
            rss.append({"sessions": i, "rss_bytes": server.rss_bytes(), "elapsed_s": round(time.perf_counter() - started, 1)})
            print(f"  {i:>4} sessions: server RSS {rss[-1]['rss_bytes'] / 2**20:.0f} MiB", flush=True)
    after_10 = next((r["rss_bytes"] for r in rss if r["sessions"] == 10), None)
    last = rss[-1]["rss_bytes"]
    return {"cycles": args.soak, "rss": rss, "failures": failures, "settle_s": settle,
            "server_options": SOAK_SERVE_ARGS, "growth_after_first_10": (last - after_10) / after_10 if after_10 else None}


# --------------------------------------------------------------------------- report
def targets(report: dict) -> list[dict]:
    rows = []

    def add(name, value, limit, unit, note=""):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            rows.append({"target": name, "measured": None, "limit": limit, "status": "not measured", "note": note})
            return
        status = "met" if value <= limit else f"missed by {value / limit - 1:.0%}" if limit else "missed"
        rows.append({"target": name, "measured": value, "limit": limit, "unit": unit, "status": status, "note": note})

    browser = report.get("browser", {})
    brushes = browser.get("brushes", {})
    add("brush → every beat view repainted, p95 (Chromium)", brushes.get("all brushes", {}).get("p95"), TARGETS_CPU["brush_p95_ms"], "ms")
    zoom = browser.get("zoom", {})
    add("zoom/pan → new raster shown, p95 (Chromium)", zoom.get("all zoom/pan", {}).get("p95"), TARGETS_CPU["zoom_p95_ms"], "ms")
    opened = browser.get("session open", {}).get("milestones_ms", {})
    add("new session: first paint (median)", opened.get("first paint", {}).get("median"), TARGETS_CPU["first_paint_ms"], "ms")
    add("new session: every view populated (median)", opened.get("every view populated, painted", {}).get("median"),
        TARGETS_CPU["populated_ms"], "ms")
    load = report.get("load")
    if load:
        ok = (not load["concurrent"]["failed_interactions"] and not load["concurrent"]["console_errors"]
              and load["concurrent"]["independent_sessions"] == load["concurrent"]["sessions"])
        add(f"{load['concurrent']['sessions']} sessions: p95 brush / single-session p95", load.get("p95_ratio"),
            TARGETS_CPU["load_ratio"], "×", "no errors, selections independent" if ok else "ERRORS or mixed selections: see below")
        if load.get("p95_ratio_in_turn"):
            add(f"{load['concurrent']['sessions']} sessions: p95 brush / the same brushes in turn",
                load["p95_ratio_in_turn"], TARGETS_CPU["load_ratio"], "×")
    soak_result = report.get("soak")
    if soak_result:
        add(f"memory over {soak_result['cycles']} session open/close cycles: growth after the first 10",
            soak_result.get("growth_after_first_10"), TARGETS_CPU["soak_growth"], "fraction")
    return rows


def result_paths(out: Path, machine_info: dict, label: str | None = None) -> dict:
    stem = f"interaction-{machine_info['name']}-{dt.date.today().isoformat()}" + (f"-{label}" if label else "")
    return {"json": out / f"{stem}.json", "md": out / f"{stem}.md"}


def write(report: dict, paths: dict) -> None:
    from benchmarks import interaction_report

    report["targets"] = targets(report)
    paths["json"].parent.mkdir(parents=True, exist_ok=True)
    paths["json"].write_text(json.dumps(report, indent=1, default=_json_default))
    paths["md"].write_text(interaction_report.markdown(report))


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


# --------------------------------------------------------------------------- main
SECTIONS = ("run", "browser", "server", "load", "soak")


def new_report(paths: dict, merge: bool) -> dict:
    """Today's results so far (``--merge``), or a fresh report."""
    if merge and paths["json"].exists():
        report = json.loads(paths["json"].read_text())
        report.setdefault("invocations", [])
        return report
    return {"benchmark": "interaction", "invocations": []}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    watch = LoadWatch()
    info = machine()
    paths = result_paths(Path(args.out), info, args.label)
    report = new_report(paths, args.merge)
    now = dt.datetime.now().isoformat(timespec="seconds")
    command = "python -m benchmarks.interaction " + shlex.join(sys.argv[1:] if argv is None else argv)
    invocation = {"date": now, "command": command, "server_options": args.serve_arg, "problems": [],
                  "options": {k: (sorted(v) if isinstance(v, set) else v) for k, v in vars(args).items()}}
    report.update(machine=info, date=now)
    report["invocations"].append(invocation)
    cores = info["cpu_cores_usable"]

    def stamp(name: str, since: int) -> None:
        """Note on a section when, how and under which load it was measured."""
        load = watch.snapshot(since)
        report[name]["measured"] = {"date": now, "command": command, "server_options": args.serve_arg,
                                    "load_average": {"mean": load["mean"], "max": load["max"]},
                                    "disturbed": bool(load["max"] and load["max"] > cores)}

    def save() -> None:
        invocation["load_average"] = {"start": info.get("load_average_start"), **watch.snapshot()}
        write(report, paths)

    log_dir = Path(tempfile.mkdtemp(prefix="ecg-interaction-"))
    servers: list[Server] = []

    def start(name: str, serve_args=()) -> Server:
        server = Server(app_args(args), log_dir / f"{name}.log", serve_args=serve_args)
        servers.append(server)
        print(f"{name}: {' '.join(server.command)}", flush=True)
        return server

    try:
        since = watch.mark()
        server = start("server", args.serve_arg)
        ready_s = server.wait_ready(args.ready_timeout)
        log = server.log()
        run_path = run_path_from_log(log)
        beats = run_beats(run_path)
        run_report = json.loads((run_path / "report.json").read_text())
        report["run"] = {"path": str(run_path), "cached": "cached run" in log, "server_ready_s": round(ready_s, 2),
                         "n_samples": run_report["input"]["n_samples"], "duration_s": run_report["input"]["duration_s"],
                         "beats": len(beats), "device": run_report["device"]["name"], "board": "bokeh"}
        stamp("run", since)
        print(f"ready after {ready_s:.1f} s: {len(beats):,} beats from {report['run']['n_samples']:,} samples", flush=True)
        save()
        if args.parts & {"open", "brush", "zoom"}:
            since = watch.mark()
            asyncio.run(browser_parts(args, server, beats, report, save))
            stamp("browser", since)
            save()
        if "server" in args.parts:
            since = watch.mark()
            server_part(args, report, save)
            stamp("server", since)
            save()
        if args.sessions:
            since = watch.mark()
            load_part(args, server, beats, report, save)
            stamp("load", since)
            save()
        check_alive(server, "the load test" if args.sessions else "the single-session parts")
        server.stop()
        if args.soak:
            since = watch.mark()
            soak_server = start("soak server", SOAK_SERVE_ARGS)
            soak_server.wait_ready(args.ready_timeout)
            print(f"soak: {args.soak} sessions opened, brushed once and closed…", flush=True)
            report["soak"] = asyncio.run(soak(args, soak_server, beats))
            stamp("soak", since)
            save()
    except Exception as err:
        invocation["problems"].append(f"{type(err).__name__}: {err}")
        print(f"error: {type(err).__name__}: {err}", file=sys.stderr)
        raise
    finally:
        for server in servers:
            server.stop()
        if servers:
            invocation["server_log_tail"] = servers[0].log()[-3000:]
        invocation["load_average"] = {"start": info.get("load_average_start"),
                                      "end": [round(x, 2) for x in os.getloadavg()], **watch.stop()}
        invocation["python_loop_ms"] = {"start": info.get("python_loop_ms"), "end": python_loop_ms()}
        write(report, paths)
    from benchmarks import interaction_report

    print(interaction_report.table(report))
    print(f"\nwrote {paths['json']} and {paths['md']}")
    report["paths"] = {k: str(v) for k, v in paths.items()}
    return report


def check_alive(server: Server, during: str) -> None:
    """Fail loudly when the server stopped under the benchmark (a crash, or a signal from outside)."""
    code = server.proc.poll()
    if code is not None:
        raise RuntimeError(f"the server stopped during {during} (exit status {code}); see its log:\n"
                           + server.log()[-1500:])


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception:  # noqa: BLE001 - the traceback above says what failed
        sys.exit(1)
