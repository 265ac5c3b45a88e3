"""GPU check of the dashboard (cuxfilter board on cuDF), for a CUDA machine without a browser.

Run from the repository root, with cuDF, cuxfilter, Panel etc. importable (e.g. the GPU pack:
``python3 .gpupack/meta/load.py && . .gpupack/meta/env.sh``)::

    python3 dashboard/gpu_check_dashboard.py [--samples 20000000] [--epochs 30] [--n 60] \
        [--out runs-gpu] [--json gpu_check.json] [--ready-timeout 900] [--compare-holoviews]

It prints one ``PASS``/``FAIL`` line per step (with timings and, on failure, the traceback) and
exits 0 only if every step passed:

1. environment: versions, ``has_gpu()``, Node.js for cuxfilter's Bokeh model;
2. the real server (``python -m panel serve dashboard/app.py --args --device gpu …``) starts, runs
   the pipeline and warms up the views (time to ready);
3. a plain HTTP GET of the page succeeds (this compiles cuxfilter's TypeScript model);
4. two sessions pulled with ``bokeh.client`` hold the full dashboard (all views, no error);
5. in this process, the GPU run's App parts (DataStore + cuxfilter board + views) for two sessions:
   scripted selections (length, latent box, score, threshold, time window, split, clear) keep the
   cuxfilter charts' cuDF filter equal to the DataStore's selection, update every view, and leave
   the other session alone; a simulated box select on a cuxfilter chart reaches the DataStore;
6. selection change → all views updated: median and p95 over ``--n`` changes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.chdir(ROOT)

warnings.filterwarnings("ignore", message=".*under-utilization due to low occupancy.*")  # cuDF/Numba chatter
RESULTS: dict = {"steps": {}}
FAILED: list[str] = []


# --------------------------------------------------------------------------- step runner
class StepTimeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise StepTimeout in the main thread after ``seconds`` (SIGALRM)."""
    def expire(signum, frame):
        raise StepTimeout(f"step took longer than {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def step(name: str, timeout: float = 600):
    """Decorator: run now, print PASS/FAIL with the time, keep what it returns."""
    def run(fn):
        started = time.perf_counter()
        print(f"---- {name}", flush=True)
        try:
            with deadline(timeout):
                value = fn()
            seconds = time.perf_counter() - started
            detail = f" — {value}" if isinstance(value, str) else ""
            print(f"PASS {name} ({seconds:.1f} s){detail}", flush=True)
            RESULTS["steps"][name] = {"ok": True, "seconds": round(seconds, 3), "value": value}
            return value
        except BaseException as err:  # noqa: BLE001 - report everything, keep going
            seconds = time.perf_counter() - started
            print(f"FAIL {name} ({seconds:.1f} s): {type(err).__name__}: {err}", flush=True)
            traceback.print_exc()
            sys.stdout.flush()
            RESULTS["steps"][name] = {"ok": False, "seconds": round(seconds, 3),
                                      "error": f"{type(err).__name__}: {err}"}
            FAILED.append(name)
            if isinstance(err, KeyboardInterrupt):
                raise
            return None
    return run


class LogCatcher(logging.Handler):
    """Collects warnings/errors logged while a step runs (HoloViews reports a failing plot
    callback as a 'Callable raised' warning instead of raising)."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records: list[str] = []
        self.seen: set[str] = set()

    def emit(self, record):
        message = record.getMessage()
        if ("raised" in message or record.levelno >= logging.ERROR) and message not in self.seen:
            self.seen.add(message)
            self.records.append(f"{record.name}: {message.splitlines()[0]}")

    LOGGERS = ("", "param", "bokeh", "panel")

    def __enter__(self):
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc):
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)


def expect(condition, message: str) -> None:
    if not condition:
        raise AssertionError(message)


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="GPU check of the ECG dashboard (cuxfilter board)")
    p.add_argument("--samples", type=int, help="synthetic recording length (default: the GPU default, 20M)")
    p.add_argument("--epochs", type=int, help="VAE epochs (default: the pipeline's)")
    p.add_argument("--out", default="runs-gpu", help="run cache folder, shared by the server and this check")
    p.add_argument("--n", type=int, default=60, help="timed selection changes")
    p.add_argument("--json", help="write the results here (default: $OUT/gpu_check.json or ./gpu_check.json)")
    p.add_argument("--ready-timeout", type=float, default=900, help="seconds for the server to become ready")
    p.add_argument("--compare-holoviews", action="store_true", help="also time the HoloViews board on this run")
    p.add_argument("--device", default="gpu", help=argparse.SUPPRESS)      # cpu/holoviews: a dry run of this
    p.add_argument("--board", default="auto", help=argparse.SUPPRESS)      # script's plumbing without a GPU
    args = p.parse_args(argv)
    out_json = Path(args.json or Path(os.environ.get("OUT", ".")) / "gpu_check.json")
    app_args = ["--device", args.device, "--board", args.board, "--out", args.out]
    board = "cuxfilter" if args.device == "gpu" and args.board in ("auto", "cuxfilter") else args.board
    if args.samples:
        app_args += ["--samples", str(args.samples)]
    if args.epochs:
        app_args += ["--epochs", str(args.epochs)]
    RESULTS["args"] = vars(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)

    from dashboard import bench_selection as bench

    # 1 ---------------------------------------------------------------- environment
    @step("environment", 300)
    def env():
        import bokeh
        import cudf
        import cupy
        import cuxfilter
        import datashader
        import holoviews
        import panel

        from dashboard.cuxfilter_board import _node_major, use_node
        from pipeline.backend import has_gpu

        node = use_node()
        info = {"python": sys.version.split()[0], "cudf": cudf.__version__, "cuxfilter": cuxfilter.__version__,
                "panel": panel.__version__, "bokeh": bokeh.__version__, "holoviews": holoviews.__version__,
                "datashader": datashader.__version__, "cupy": cupy.__version__,
                "gpu": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(), "has_gpu": has_gpu(),
                "node": node, "node_major": _node_major(node) if node else 0, "machine": bench.machine()}
        RESULTS["environment"] = info
        expect(info["has_gpu"], "pipeline.backend.has_gpu() is False")
        expect(info["node_major"] >= 18, f"Node.js >= 18 needed for cuxfilter's Bokeh model; got {node!r}")
        return f"{info['gpu']} · cudf {info['cudf']} · cuxfilter {info['cuxfilter']} · node {info['node_major']}"

    # 2-4 ------------------------------------------------------------- the real server
    log_path = Path(os.environ.get("OUT", args.out)) / "gpu_check_server.log"
    server = None
    try:
        @step("server start → dashboard ready", args.ready_timeout + 30)
        def start():
            nonlocal server
            server = bench.Server(app_args, log_path)
            ready = server.wait_ready(args.ready_timeout)
            text = server.log()
            RESULTS["startup"] = {"ready_s": round(ready, 2), "cached": "cached run" in text,
                                  "log_tail": text[-2500:]}
            expect("views warmed up" in text, "the server did not warm the views up")
            return f"ready after {ready:.1f} s ({'cached run' if 'cached run' in text else 'pipeline ran'})"

        if server is not None and "server start → dashboard ready" not in FAILED:
            @step("HTTP GET of the page (compiles cuxfilter's TypeScript model)", 300)
            def http():
                status, size = bench.http_get(server.url, timeout=240)
                expect(status == 200, f"HTTP {status}")
                return f"HTTP {status}, {size:,} bytes"

            @step("two sessions pulled with bokeh.client hold the dashboard", 300)
            def pulled():
                pages = [bench.pull_dashboard(server.url) for _ in range(2)]
                RESULTS["pulled"] = pages
                wanted = {"signal", "lengths", "latent", "scores", "outliers", "beat", "decoded", "centre"}
                for page in pages:
                    expect(page["dashboard"] and not page["error"], f"no dashboard in the document: {page}")
                    expect(page["signal_figure"], "no 'ecg-signal' figure")
                    expect(wanted <= set(page["views"]), f"missing views: {wanted - set(page['views'])}")
                return f"{pages[0]['models']} models, {pages[0]['plots']} plots, first pull {pages[0]['seconds']:.1f} s"
    finally:
        if server is not None:
            tail = server.log()[-4000:]
            server.stop()
            if any(not s["ok"] for s in RESULTS["steps"].values()):
                print("---- server log (tail)\n" + tail, flush=True)

    # 5 ---------------------------------------------------------------- in-process sessions
    state: dict = {}

    @step("load the GPU run and prepare the cuxfilter board (cuDF frames, warm-up)", args.ready_timeout)
    def load():
        run, shared = bench.load_shared(app_args)
        state.update(run=run, shared=shared)
        expect(run.report["device"]["name"] == args.device, f"run device is {run.report['device']['name']}")
        expect(shared.extras.get("board") == board, f"board is {shared.extras.get('board')}")
        RESULTS["run"] = {"n_samples": run.report["input"]["n_samples"], "beats": len(run.beats),
                          "stages_s": run.report.get("stages_s"), "path": str(run.path)}
        return f"{len(run.beats):,} beats from {run.report['input']['n_samples']:,} samples"

    def consistent(session) -> str | None:
        if not hasattr(session.board, "filtered_count"):
            return None
        want = session.store.selection.count
        got = session.board.filtered_count()
        return None if got == want else f"cuxfilter shows {got} beats, the DataStore selects {want}"

    if "shared" in state:
        shared = state["shared"]

        def _scripted():
            a, b = bench.Session(shared), bench.Session(shared)
            total = len(shared.beats)
            expect(a.board.name == board, f"board {a.board.name}")
            timings = {}
            for kind, changes in bench.selection_plan(shared, 12) + [
                    ("split", {"split": "test"}), ("follow off", {"follow_window": False}),
                    ("empty", {"brush": {"z1": (1e6, 1e6 + 1)}}),      # selects nothing: charts must cope
                    ("split all", {"split": "all", "follow_window": True, "brush": {}, "time_range": None})]:
                result = a.apply(**changes)
                timings.setdefault(kind, []).append(round(result["seconds"] * 1000, 1))
                expect(not result["stale_views"], f"{kind}: views not updated: {result['stale_views']}")
                problem = consistent(a)
                expect(problem is None, f"{kind} {changes}: {problem}")
                expect(b.store.selection.count == total and consistent(b) is None,
                       f"{kind}: session B changed ({b.store.selection.count}, {consistent(b)})")
            RESULTS["scripted_ms"] = timings
            if board != "cuxfilter":
                return f"{sum(len(v) for v in timings.values())} changes consistent (no cuxfilter chart to click)"
            # a user's box select on a cuxfilter chart (what the browser's tool sends)
            lo, hi = shared.extent("length_s")
            mid = (lo + (hi - lo) * 0.4, lo + (hi - lo) * 0.6)
            with a._curdoc(a.doc):
                a.board.charts["lengths"].chart.box_stream.event(bounds=(mid[0], 0, mid[1], 1), x_selection=mid,
                                                                 y_selection=(0, 1))
            expect(set(a.store.brush) == {"length_s"}, f"brush after the chart's box select: {a.store.brush}")
            expect(consistent(a) is None, consistent(a) or "")
            expect(b.store.brush == {} and b.board.filtered_count() == total, "session B moved with A's chart")
            expect(b.board.dashboard._query_local_variables_dict is not a.board.dashboard._query_local_variables_dict,
                   "sessions share cuxfilter's query variables")
            return f"{sum(len(v) for v in timings.values())} changes consistent"

        @step("scripted selections: cuDF filter == DataStore selection, views updated, sessions apart", 900)
        def scripted():
            with LogCatcher() as caught:
                result = _scripted()
            expect(not caught.records, f"plot callbacks failed: {caught.records[:3]}")
            return result

        @step(f"selection change → all views updated, {board} board, {args.n} changes", 1800)
        def timed():
            with LogCatcher() as caught:
                result = bench.measure_selections(shared, args.n, check=consistent)
            expect(not caught.records, f"plot callbacks failed: {caught.records[:3]}")
            RESULTS["selection_cuxfilter"] = result
            expect(result["n_problems"] == 0, f"{result['n_problems']} problems: {result['problems'][:3]}")
            s = result["all"]
            return f"median {s['median_ms']:.0f} ms, p95 {s['p95_ms']:.0f} ms, max {s['max_ms']:.0f} ms"

        if args.compare_holoviews:
            @step(f"selection change → all views updated, HoloViews board on the same run, {args.n} changes", 1800)
            def timed_hv():
                from dashboard.holoviews_board import warm_up

                shared.extras["board"] = "holoviews"
                try:
                    warm_up(shared)
                    result = bench.measure_selections(shared, args.n)
                finally:
                    shared.extras["board"] = "cuxfilter"
                RESULTS["selection_holoviews"] = result
                s = result["all"]
                return f"median {s['median_ms']:.0f} ms, p95 {s['p95_ms']:.0f} ms"

    # ---------------------------------------------------------------- report
    RESULTS["failed"] = FAILED
    with contextlib.suppress(Exception):
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(RESULTS, indent=1, default=str))
        print(f"wrote {out_json}")
    print("==== " + ("ALL PASS" if not FAILED else f"{len(FAILED)} FAIL: " + "; ".join(FAILED)), flush=True)
    return 0 if not FAILED else 1


if __name__ == "__main__":
    sys.exit(main())
