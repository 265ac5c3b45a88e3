"""The dashboard as a user feels it, against a real ``panel serve dashboard/app.py``.

    python -m benchmarks.interaction                      # 2M samples on the CPU, in Chromium
    python -m benchmarks.interaction --quick --sessions 2 --soak 20 --out /tmp/b   # the smoke test
    python -m benchmarks.interaction --device gpu --client bokeh --boards bokeh,cuxfilter --sessions 20 --soak 200
    python -m benchmarks.interaction --device gpu --scale  # 200M samples: server-side brushes only

What each part measures: docs/benchmarking.md. Each part is a PASS/FAIL/SKIP step within
``--budget-s``; ``--out/interaction-<machine>-<date>[-<label>].{json,md}`` is rewritten after each.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import importlib.util
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

from benchmarks import measure, report as results, sessions
from benchmarks.many_sessions import SEED, SHORT_LIFETIME, check_alive, load_part, soak
from benchmarks.measure import summaries, summary
from benchmarks.recordings import recording_csv
from benchmarks.server_side import load_shared, server_side
from benchmarks.sessions import ALL_BRUSHES
from tests.support.bokeh_session import ProtocolSession, SessionError
from tests.support.served import CHROMIUM, Server, chromium_version

QUICK = dict(samples=300_000, epochs=3, brushes=3, gestures=4, opens=2, server_n=5, load_brushes=3)
SCALE_SAMPLES, SCALE_EPOCHS = 200_000_000, 3   # a brush's cost does not depend on how well the model is trained
READY_TIMEOUT_S = 1800
COUNTS = {  # option: default, least value, what it counts
    "brushes": (50, 1, "timed brushes on each linked chart"),
    "gestures": (24, 1, "timed zoom/pan gestures on the recording"),
    "opens": (5, 1, "timed session opens, each a fresh session"),
    "server-n": (50, 1, "server-side repeats per interaction kind"),
    "sessions": (0, 0, "load test: concurrent sessions (e.g. 20; 0: off)"),
    "load-brushes": (10, 1, "brushes per session in the load test"),
    "soak": (0, 0, "soak test: sessions opened and closed (e.g. 200; 0: off)"),
}


def parse_args(argv):
    p = results.parser("interaction", __doc__)
    p.add_argument("--samples", type=int, help="synthetic recording length (default: the pipeline's, 2M on a CPU)")
    p.add_argument("--epochs", type=int, help="VAE epochs of the run (default: the pipeline's)")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu", "auto"))
    p.add_argument("--client", choices=("browser", "bokeh"), default=None,
                   help="what drives the sessions: Chromium (default when installed) or bokeh protocol sessions")
    p.add_argument("--boards", default="bokeh", help="boards to measure: bokeh, cuxfilter (default bokeh)")
    for name, (default, _, what) in COUNTS.items():
        p.add_argument(f"--{name}", type=int, default=default, help=f"{what} (default {default})")
    p.add_argument("--load-timeout", type=float, default=420, help="seconds each round of the load test may take")
    p.add_argument("--scale", action="store_true", help="server-side brushes on 200M samples, nothing served")
    p.add_argument("--budget-s", type=float, help="the whole run's seconds; steps that no longer fit are skipped")
    p.add_argument("--quick", action="store_true", help=f"tiny sizes (the smoke test): {QUICK}")
    p.add_argument("--label", help="appended to the results' file name (a variant kept beside the main results)")
    p.add_argument("--runs", default="runs", help="run cache folder (default runs; a cached run is reused)")
    args = p.parse_args(argv)
    for key, value in QUICK.items() if args.quick else ():
        if getattr(args, key) in (None, p.get_default(key)):
            setattr(args, key, value)
    for name, (_, least, _) in COUNTS.items():
        if getattr(args, name.replace("-", "_")) < least:
            p.error(f"--{name} is too small: {getattr(args, name.replace('-', '_'))}")
    args.boards = [b.strip() for b in args.boards.split(",") if b.strip()]
    if set(args.boards) - {"bokeh", "cuxfilter"}:
        p.error(f"--boards: bokeh, cuxfilter or both; got {args.boards}")
    has_browser = Path(CHROMIUM).exists() and importlib.util.find_spec("playwright") is not None
    args.client = args.client or ("browser" if has_browser else "bokeh")
    if args.client == "browser" and not has_browser:
        p.error(f"{CHROMIUM} or playwright is missing: use --client bokeh")
    if args.client == "browser" and args.boards != ["bokeh"] and not args.scale:
        p.error("the cuxfilter board is measured over the protocol: use --client bokeh")
    args.runs, args.out = str(Path(args.runs).resolve()), Path(args.out).resolve()
    return args


def app_args(args, board: str = "bokeh", epochs=None, input_path=None) -> list[str]:
    out = ["--device", args.device, "--board", board, "--out", args.runs]
    for name, value in (("samples", args.samples), ("epochs", epochs or args.epochs), ("input", input_path)):
        out += [f"--{name}", str(value)] if value else []
    return out


class Bench:
    """The report being written, the budget, and the steps that fill it."""

    def __init__(self, args, argv):
        self.args, self.budget, self.watch = args, measure.Budget(args.budget_s), measure.LoadWatch()
        self.serve_args = SHORT_LIFETIME if args.client == "bokeh" else []
        self.machine = measure.describe_machine(gpu=args.device == "gpu")
        self.machine["chromium"] = chromium_version() if args.client == "browser" else None
        self.paths = results.paths(args.out, "interaction", self.machine["name"], args.label)
        self.now = dt.datetime.now().isoformat(timespec="seconds")
        self.command = results.command("interaction", argv)
        self.invocation = {"date": self.now, "command": self.command, "server_options": self.serve_args,
                           "problems": [], "options": dict(vars(args))}
        self.report = {"benchmark": "interaction", "invocations": [self.invocation], "machine": self.machine,
                       "date": self.now, "steps": {}, "failed": []}
        self.logs = Path(tempfile.mkdtemp(prefix="ecg-interaction-"))

    def step(self, name: str, path: tuple, fn, limit: float = math.inf, needs: float = 10.0):
        """Run ``fn`` within ``limit`` and the budget; its section goes to ``path``, stamped with when, how and
        under which load it was measured. A section's ``problems`` fail the step."""
        allowed = min(limit, self.budget.left() - 5)
        if allowed < needs:
            print(f"SKIP {name}: {self.budget.left():.0f} s of the budget left, it needs ~{needs:.0f} s", flush=True)
            self.report["steps"][name] = {"ok": None, "skipped": "budget"}
            return None
        started, since = time.perf_counter(), len(self.watch.samples)
        print(f"---- {name}", flush=True)
        try:
            with self.budget.deadline(allowed):
                section = fn()
            if path:
                place = self.report
                for key in path[:-1]:
                    place = place.setdefault(key, {})
                load = self.watch.snapshot(since)
                place[path[-1]] = {**section, "measured": {
                    "date": self.now, "command": self.command, "server_options": self.serve_args,
                    "load_average": {"mean": load["mean"], "max": load["max"]},
                    "disturbed": bool(load["max"] and load["max"] > self.machine["cpu_cores_usable"])}}
            if section.get("problems"):
                raise AssertionError("; ".join(section["problems"][:3]))
            print(f"PASS {name} ({time.perf_counter() - started:.1f} s)", flush=True)
            self.report["steps"][name] = {"ok": True, "seconds": round(time.perf_counter() - started, 2)}
            return section
        except BaseException as err:  # noqa: BLE001 - report everything, keep going
            print(f"FAIL {name} ({time.perf_counter() - started:.1f} s): {type(err).__name__}: {err}", flush=True)
            traceback.print_exc()
            self.report["steps"][name] = {"ok": False, "seconds": round(time.perf_counter() - started, 2),
                                          "error": f"{type(err).__name__}: {err}"}
            self.report["failed"].append(name)
            if isinstance(err, KeyboardInterrupt):
                raise
            return None
        finally:
            self.save()

    def save(self) -> None:
        self.invocation.setdefault("load_average", {}).update(start=self.machine.get("load_average_start"),
                                                              **self.watch.snapshot())
        self.report["targets"] = targets(self.report)
        results.write(self.report, self.paths, results.dashboard_markdown(self.report))

    def start(self, name: str, serve_args=(), board: str = "bokeh") -> tuple[Server, float]:
        """A server of ``board``'s dashboard, ready; the seconds it took."""
        server = Server(app_args(self.args, board), self.logs / f"{name}.log", serve_args=serve_args)
        print(f"{name}: {' '.join(server.command)}", flush=True)
        return server, server.wait_ready(min(READY_TIMEOUT_S, self.budget.left() - 20))


# --------------------------------------------------------------------------- in Chromium
MILESTONES = {"first_paint": "first paint", "first_contentful_paint": "first contentful paint",
              "response_end": "page loaded (HTTP)", "marker": "version marker", "idle": "document idle",
              "charts": "charts drawn", "table": "table rows", "populated": "every view populated",
              "populated_painted": "every view populated, painted"}


async def browser_parts(args, url: str, beats, duration_s: float) -> dict:
    from playwright.async_api import async_playwright

    rng, section, timings, errors = np.random.default_rng(SEED), {}, [], []
    async with async_playwright() as pw:
        browser = await sessions.launch(pw)
        try:
            for i in range(args.opens + 1):                 # the first one warms the paths up
                page = await sessions.BrowserPage.new(browser)
                try:
                    timings += [await page.open(url, 120)] if i else []
                    errors += page.errors
                finally:
                    await page.close()
            milestones = {label: summary([t[k] for t in timings if t.get(k) is not None])
                          for k, label in MILESTONES.items()}
            section["session open"] = {"milestones_ms": milestones, "per_open": timings, "console_errors": errors}
            page = await sessions.BrowserPage.new(browser)
            try:
                await page.open(url, 120)
                await browser_brushes(page, beats, args.brushes, rng, section)
                await browser_gestures(page, args.gestures, duration_s, rng, section)
                section["console_errors"] = page.errors
            finally:
                await page.close()
        finally:
            await browser.close()
    section["problems"] = section["brush_failures"] + section["zoom_failures"]
    return section


async def browser_brushes(page, beats, n: int, rng, section: dict) -> None:
    """:func:`sessions.brush_rounds` with the mouse, then ``n // 5`` family rows clicked."""
    samples, failures = {}, []

    async def timed(kind, gesture):
        try:
            g = await gesture
            if kind:
                samples.setdefault(g.kind, []).append(g.latency_ms)
        except sessions.GestureError as err:
            failures.append(str(err))
        await asyncio.sleep(0.1)

    await sessions.brush_rounds(n, timed, lambda view: page.brush_values(view, **sessions.brush_span(view, beats, rng)),
                                page.clear)
    families = await page.open_families()
    for i in range(max(n // 5, 1) + 1):                    # the first click is an untimed warm-up
        await timed("select family" if i else None, page.select_family(i % families))
    section["brushes"], section["brush_failures"] = summaries(samples, ALL_BRUSHES), failures


async def browser_gestures(page, n: int, duration_s: float, rng, section: dict) -> None:
    """``n`` wheel zooms and drags of the recording, each timed to the new window's picture painted."""
    samples, failures = {}, []
    for _ in range(2):                                    # untimed warm-up: a zoom in and back out
        await page.wheel(0.5, 4)
        await page.wheel(0.5, -4)
    step = 0
    while sum(map(len, samples.values())) < n and step < 4 * n:
        kind, amount = sessions.next_gesture(await page.x_range(), duration_s, step, rng)
        step += 1
        try:
            g = await (page.wheel(float(rng.uniform(0.3, 0.7)), int(amount)) if kind == "wheel" else page.pan(amount))
        except sessions.GestureError as err:
            failures.append(str(err))
            continue
        if g is not None:                                 # None: the window could not move that way
            samples.setdefault(g.kind, []).append(g.latency_ms)
            await asyncio.sleep(0.15)
    section["zoom"] = summaries(samples, {"all zoom/pan": lambda kind: True})
    section["zoom_failures"] = failures


# --------------------------------------------------------------------------- over the protocol
async def protocol_parts(args, url: str, board: str, beats, duration_s: float) -> dict:
    """Session opens (connect → the dashboard pulled), brushes, clears and zoom/pan over the protocol."""
    opens, out, failures = [], {}, []
    for i in range(args.opens + 1):     # the first one warms up
        session = ProtocolSession(url)
        try:
            timing = await session.open(120)
            opens += [timing] if i else []
        finally:
            await session.close()
    session, rng = ProtocolSession(url), np.random.default_rng(SEED)
    await session.open(120)

    async def timed(kind: str | None, gesture) -> None:
        try:
            seconds = await gesture
        except SessionError as err:
            failures.append(f"{kind or 'warm-up'}: {err}")
            return
        if kind:
            out.setdefault(kind, []).append(seconds * 1e3)

    try:
        await sessions.brush_rounds(
            args.brushes, timed,
            lambda view: sessions.protocol_brush(session, view, sessions.brush_bounds(beats, view, rng), board),
            lambda view: sessions.protocol_brush(session, view, None, board))
        for kind, lo, hi in sessions.zoom_plan(duration_s, args.gestures, rng):
            await timed(kind, sessions.protocol_zoom(session, lo, hi))
        errors = list(session.errors) + failures
    finally:
        await session.close()
    result = summaries(out, {**ALL_BRUSHES, "all zoom/pan": lambda kind: kind in ("zoom in", "pan", "zoom out")})
    result["session open"] = summary([1e3 * o["total_s"] for o in opens])
    result["document"] = {"models": opens[0]["models"], "bytes": opens[0]["bytes"]} if opens else {}
    return {**result, "errors": errors, "problems": errors}


# --------------------------------------------------------------------------- boards, in process
def in_process(args, bench: Bench, input_path=None, scale: bool = False) -> None:
    """Server-side times of each board on the run the servers used (``scale``: a run of its own)."""
    state = {}

    def load():
        started = time.perf_counter()
        run, state["shared"] = load_shared(app_args(args, args.boards[0], SCALE_EPOCHS if scale else None,
                                                    input_path))
        return {"beats": len(run.beats), "n_samples": run.report["input"]["n_samples"],
                "stages_s": run.report.get("stages_s"), "load_s": round(time.perf_counter() - started, 1)}

    if not bench.step("in process: the run and the boards' shared data", ("scale",) if scale else (), load,
                      limit=600 if scale else 300, needs=60 if scale else 30):
        return
    shared = state["shared"]
    for board in args.boards:
        def measured(board=board):
            if board == "cuxfilter":
                from dashboard import cuxfilter_board

                cuxfilter_board.prepare(shared)
            shared.extras["board"] = board
            if scale:
                return server_side(shared, args.server_n, 10, n_sessions=2, seed=SEED)
            return server_side(shared, args.server_n, max(args.server_n // 2, 10),
                               n_sessions=max(args.opens, 3), seed=SEED)

        path = ("scale", "boards", board) if scale else ("server",) if board == "bokeh" else ("cuxfilter", "server")
        bench.step(f"{board}: server side, {args.server_n} per kind", path, measured, limit=240, needs=30)


# --------------------------------------------------------------------------- the whole run
def served_board(args, bench: Bench, board: str):
    """A server for ``board``: the single-session parts and (default board) the load test; the run's beats."""
    state, section = {}, ("run",) if board == "bokeh" else ("cuxfilter", "run")

    def start():
        state["server"], ready_s = bench.start(f"server-{board}", bench.serve_args, board)
        log = state["server"].log()
        run = sessions.run_from_log(log)
        state["beats"], state["duration_s"] = sessions.run_beats(run), run.report["input"]["duration_s"]
        return {"path": str(run.path), "cached": "cached run" in log, "server_ready_s": round(ready_s, 2),
                "n_samples": run.report["input"]["n_samples"], "duration_s": state["duration_s"],
                "beats": len(state["beats"]), "device": run.report["device"]["name"], "board": board}

    try:
        if not bench.step(f"{board}: server start → ready", section, start, needs=60):
            return None
        server, beats, duration_s = state["server"], state["beats"], state["duration_s"]
        what = f"{args.opens} opens, {args.brushes} brushes per chart, {args.gestures} zoom/pan"
        if args.client == "browser":
            bench.step(f"{board}: Chromium: {what}", ("browser",),
                       lambda: asyncio.run(browser_parts(args, server.url, beats, duration_s)))
        else:
            bench.step(f"{board}: protocol: {what}", ("protocol",) if board == "bokeh" else ("cuxfilter", "protocol"),
                       lambda: asyncio.run(protocol_parts(args, server.url, board, beats, duration_s)), needs=40)
        if board == "bokeh" and args.sessions:
            bench.step(f"{board}: load test, {args.sessions} sessions × {args.load_brushes} brushes", ("load",),
                       lambda: load_part(args, server, beats), needs=60)
        check_alive(server, "the single-session parts and the load test")
        return beats
    finally:
        if "server" in state:
            bench.invocation.setdefault("server_log_tail", state["server"].log()[-3000:])
            state["server"].stop()


def targets(report: dict) -> list[dict]:
    """The 2-core CPU machine's targets (2M samples), or the H200's (20M; 200M for the scale) on a GPU."""
    def at(section, *keys):
        for key in keys:
            section = section.get(key) if isinstance(section, dict) else None
        return None if isinstance(section, float) and math.isnan(section) else section

    t, rows = results.target, []
    if not report["machine"].get("gpu"):
        opened = ("browser", "session open", "milestones_ms")
        rows += [t("brush → every beat view repainted, p95 (Chromium)",
                   at(report, "browser", "brushes", "all brushes", "p95"), 100.0, "ms"),
                 t("zoom/pan → new raster shown, p95 (Chromium)", at(report, "browser", "zoom", "all zoom/pan", "p95"),
                   400.0, "ms"),
                 t("new session: first paint (median)", at(report, *opened, "first paint", "median"), 1500.0, "ms"),
                 t("new session: every view populated (median)",
                   at(report, *opened, "every view populated, painted", "median"), 4000.0, "ms")]
    else:
        for name, section in (("", report), ("cuxfilter: ", report.get("cuxfilter"))):
            if section and (name == "" or section.get("protocol") or section.get("server")):
                rows += [t(f"{name}brush, end to end p95", at(section, "protocol", "all brushes", "p95"), 50.0, "ms"),
                         t(f"{name}brush, server side p95", at(section, "server", "kinds", "all brushes", "p95"),
                           20.0, "ms"),
                         t(f"{name}zoom/pan → new raster p95", at(section, "protocol", "all zoom/pan", "p95"),
                           150.0, "ms"),
                         t(f"{name}session open (protocol) median", at(section, "protocol", "session open", "median"),
                           3000.0, "ms")]
        rows += [t(f"{board}: {report['scale']['beats']:,} beats, brush server side p95",
                   b["kinds"]["all brushes"]["p95"], 100.0, "ms") for board, b in (at(report, "scale", "boards") or {}).items()]
    load, soaked = report.get("load"), report.get("soak")
    if load:
        n = load["concurrent"]["sessions"]
        ok = not load.get("problems") and load["concurrent"]["independent_sessions"] == n
        rows.append(t(f"{n} sessions: p95 brush / single-session p95", load.get("p95_ratio"), 2.0, "×",
                      note="no errors, selections independent" if ok else "ERRORS or mixed selections: see below"))
        if load.get("p95_ratio_in_turn"):
            rows.append(t(f"{n} sessions: p95 brush / the same brushes in turn", load["p95_ratio_in_turn"], 2.0, "×"))
    if soaked:
        rows.append(t(f"memory over {soaked['cycles']} session open/close cycles: growth after the first 10",
                      soaked.get("growth_after_first_10"), 0.05, "fraction"))
    return rows


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    Path(args.runs).mkdir(parents=True, exist_ok=True)
    bench = Bench(args, argv)
    try:
        if args.scale:
            made = bench.step(f"scale: {SCALE_SAMPLES:,}-sample recording", (), lambda: {
                "path": recording_csv(SCALE_SAMPLES, Path(args.runs) / "inputs").path}, limit=300, needs=30)
            if made:
                in_process(args, bench, input_path=made["path"], scale=True)
        else:
            beats = [served_board(args, bench, board) for board in args.boards][0]
            in_process(args, bench)
            if args.soak and beats is not None:
                bench.step(f"soak: up to {args.soak} sessions opened, brushed and closed", ("soak",),
                           lambda: soak(args, bench, beats), needs=60)
    finally:
        bench.invocation.setdefault("load_average", {}).update(end=measure.load_average(), **bench.watch.stop())
        bench.invocation["python_loop_ms"] = {"start": bench.machine.get("python_loop_ms"),
                                              "end": measure.python_loop_ms()}
        bench.invocation["problems"] = list(bench.report["failed"])
        bench.save()
    print("\n".join(results.target_lines(bench.report["targets"]) + results.invocation_lines(bench.report)))
    print(f"\nwrote {bench.paths['json']} and {bench.paths['md']}")
    print("==== " + ("ALL PASS" if not bench.report["failed"] else
                     f"{len(bench.report['failed'])} FAIL: " + "; ".join(bench.report["failed"])), flush=True)
    return {**bench.report, "paths": {k: str(v) for k, v in bench.paths.items()}}


if __name__ == "__main__":
    sys.exit(1 if main()["failed"] else 0)
