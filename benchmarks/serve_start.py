"""Fresh processes: from the server command to a usable dashboard, or (``--pipeline``) ``pipeline run``.

    python -m benchmarks.serve_start [--runs 3] [--cold] [--no-browser | --pipeline] [-- APP ARGS ...]

A server start is timed to its first HTTP answer (a static file: no dashboard is built for nobody),
its "ready" log line, and the first visitor's usable dashboard: every view drawn in Chromium
(started before the server), or with ``--no-browser`` a protocol session holding the whole
dashboard (with the seconds that client spent decoding it, BokehJS's work in a browser).
``--pipeline`` times ``python -m pipeline run APP ARGS`` from outside instead, with each cold run's
stage times. ``--cold`` recomputes the run (``--no-cache``); otherwise (and always with
``--pipeline``) one untimed start comes first. Writes ``serve-start-`` (``pipeline-start-``)
``<machine>-<cold|cached>-<date>.{json,md}``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

from benchmarks import report
from benchmarks.measure import describe_machine, python_loop_ms, summary
from pipeline import backend
from tests.support.served import CHROMIUM, CHROMIUM_ARGS, ROOT, Server

# Every view drawn: the selection marker, the histograms' bars and the recording's first drawing.
USABLE_JS = """() => {
    if (!window.Bokeh || !Bokeh.documents.length) return false;
    const doc = Bokeh.documents[0], get = (name) => doc.get_model_by_name(name);
    if (!get('ecg-version') || !get('ecg-lengths') || !get('ecg-signal')) return false;
    const bars = get('ecg-lengths').renderers[0].data_source.data.all;
    const signal = get('ecg-signal').renderers.slice(0, 2).map(r => r.data_source.data);
    return bars.length > 0 && (signal[0].image[0].length > 1 || signal[1].t.length > 0);
}"""
NAMES = {"http_s": "server listening (first HTTP answer)", "ready_s": "server ready (log)",
         "usable_s": "usable dashboard", "total_s": "pipeline run finished"}


def usable_in_browser(browser, server: Server, timeout: float) -> float:
    """Seconds from the command until a fresh browser page shows a usable dashboard."""
    page = browser.new_page(viewport={"width": 1600, "height": 1250})
    try:
        deadline = server.started + timeout
        while True:
            try:
                page.goto(server.url, timeout=5000)
                break
            except Exception:           # not listening yet
                if time.perf_counter() > deadline:
                    raise TimeoutError(f"no page at {server.url}:\n{server.log()[-2000:]}") from None
                time.sleep(0.05)
        page.wait_for_function(USABLE_JS, timeout=max(deadline - time.perf_counter(), 1) * 1000, polling=50)
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        return time.perf_counter() - server.started
    finally:
        page.close()


def usable_by_protocol(server: Server, timeout: float) -> tuple[float, float]:
    """Seconds from the command until one protocol session, opened as soon as the page answers and
    kept open (as a browser tab is; a new session each poll would load the server with progress
    pages), holds the recording and histogram views; and its seconds spent decoding messages."""
    from tests.support.bokeh_session import ProtocolSession

    def left() -> float:
        return max(server.started + timeout - time.perf_counter(), 1.0)

    async def watch() -> float:
        session = ProtocolSession(server.url)
        await session.open(left())
        try:
            await session.wait_for(lambda: all(session.doc.get_model_by_name(name) is not None
                                               for name in ("ecg-version", "ecg-lengths", "ecg-signal")),
                                   time.perf_counter(), left(), quiet=0.0)
            return session.decode_s
        finally:
            await session.close()

    decode_s = asyncio.run(watch())
    return time.perf_counter() - server.started, decode_s


def one_start(app_args: list[str], log: Path, browser, timeout: float) -> dict:
    """One fresh server, its log watched for the ready line while the first visitor waits."""
    server = Server(app_args, log)
    with ThreadPoolExecutor(1) as watcher:
        ready = watcher.submit(server.wait_ready, timeout)
        try:
            server.wait_listening(timeout)
            http_s = time.perf_counter() - server.started
            if browser:
                usable_s, extra = usable_in_browser(browser, server, timeout), {}
            else:
                usable_s, decode_s = usable_by_protocol(server, timeout)
                extra = {"client_decode_s": round(decode_s, 3)}
            return {"http_s": round(http_s, 3), "ready_s": round(ready.result(), 3), "usable_s": round(usable_s, 3),
                    **extra, "cached": "cached run" in server.log()}
        finally:
            server.stop()


def pipeline_start(app_args: list[str], log: Path, browser, timeout: float) -> dict:
    """One fresh ``python -m pipeline run`` process, timed from outside, and its report's stage times."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pipeline", "run", "--quiet", *app_args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    total_s = time.perf_counter() - started
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"pipeline run {' '.join(app_args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    run = json.loads((ROOT / done.stdout.splitlines()[0].split()[1] / "report.json").read_text())
    return {"total_s": round(total_s, 3), "stages_s": run["stages_s"], "beats": run["counts"]["beats"],
            "epochs": len(run["training"]["loss_history"]), "final_loss": run["training"]["loss_history"][-1]}


def main(argv: list[str] | None = None) -> dict:
    p = report.parser("serve_start", __doc__)
    p.add_argument("--runs", type=int, default=3, help="fresh processes to time (median of them)")
    p.add_argument("--cold", action="store_true", help="recompute the run each time (--no-cache)")
    p.add_argument("--no-browser", action="store_true", help="usable = a bokeh.client session holds the dashboard")
    p.add_argument("--pipeline", action="store_true", help="time `python -m pipeline run APP ARGS` instead")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("app_args", nargs=argparse.REMAINDER, help="arguments for the app, after --")
    args = p.parse_args(argv)
    app_args = [a for a in args.app_args if a != "--"] + (["--no-cache"] if args.cold else [])
    logs, start = Path(tempfile.mkdtemp(prefix="serve-start-")), pipeline_start if args.pipeline else one_start

    def measure(browser) -> list[dict]:
        if not args.cold or args.pipeline:     # untimed: fills the cache, and Numba's disk cache for pipeline runs
            start(app_args, logs / "fill.log", browser, args.timeout)
        runs = []
        for k in range(args.runs):
            loop_ms = python_loop_ms()   # the cores' speed just before this start
            runs.append({**start(app_args, logs / f"run-{k}.log", browser, args.timeout), "python_loop_ms": loop_ms})
            print(f"run {k + 1}/{args.runs}: {runs[-1]}", file=sys.stderr, flush=True)
        return runs

    if args.no_browser and not args.pipeline:
        # The client's libraries load before any server starts, as the browser is started first: loaded
        # after the server listened, their imports (on the same cores) would be timed as the server's start.
        from tests.support.bokeh_session import ProtocolSession  # noqa: F401
        from tests.support.served import register_panel_models

        register_panel_models()
    if args.pipeline or args.no_browser:
        runs = measure(None)
    else:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                runs = measure(browser)
            finally:
                browser.close()
    s = {key: summary([r[key] for r in runs], digits=3) for key in (*NAMES, "client_decode_s", "python_loop_ms")
         if key in runs[0]}
    machine = describe_machine(backend.has_gpu())
    usable_by = "pipeline" if args.pipeline else "protocol" if args.no_browser else "chromium"
    result = {"benchmark": "pipeline_start" if args.pipeline else "serve_start", "date": date.today().isoformat(),
              "machine": machine, "app_args": app_args, "cold": args.cold, "usable_by": usable_by, "runs": runs,
              "summary": s}
    lines = [f"# {'pipeline run' if args.pipeline else 'Server start → usable dashboard'} "
             f"({'recomputed' if args.cold else 'cached'} run)", "",
             f"Machine: {report.machine_line(machine)}. App arguments: `{' '.join(app_args) or '(defaults)'}`; "
             f"usable = {usable_by}.", "",
             *report.table(["from the command to", "median (s)", "min", "max"],
                           [[name, *(f"{s[k][x]:.2f}" for x in ("median", "min", "max"))]
                            for k, name in NAMES.items() if k in s])]
    if args.pipeline and args.cold:
        result["cold_stages_median_s"] = stages = {k: statistics.median(r["stages_s"].get(k, 0.0) for r in runs)
                                                   for k in dict.fromkeys(k for r in runs for k in r["stages_s"])}
        lines += ["Stages, median: " + ", ".join(f"{k} {v:.2f} s" for k, v in stages.items()) + ".", ""]
    if "client_decode_s" in s:
        d = s["client_decode_s"]
        lines += [f"Of the time to a usable dashboard, the protocol client spent {d['median']:.2f} s "
                  f"({d['min']:.2f}–{d['max']:.2f}) decoding the server's messages into its own document in "
                  "Python, the work BokehJS does in a browser.", ""]
    loop = s["python_loop_ms"]
    lines += [f"The cores' speed before each start (`benchmarks.measure.python_loop_ms`, lower is faster): "
              f"median {loop['median']:.0f} ms ({loop['min']:.0f}–{loop['max']:.0f})."]
    label = f"{machine['name']}-{'cold' if args.cold else 'cached'}"
    report.write(result, report.paths(args.out, "pipeline-start" if args.pipeline else "serve-start", label),
                 "\n".join(lines))
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main()
