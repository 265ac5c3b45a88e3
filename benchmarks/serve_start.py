"""Benchmark: from the server command to a usable dashboard, in fresh processes.

    python -m benchmarks.serve_start [--runs 3] [--cold] [--no-browser] [-- APP ARGS ...]

Each run starts ``panel serve dashboard/app.py`` (what ``./run.sh`` starts) in a new process and
times, from the command: the server listening (its first HTTP answer, for a static file: asking
for the page would make the server build a dashboard for a visitor who never comes); the server's
"ready" log line (the run loaded or computed, the views prepared); and the first visitor's usable
dashboard — in Chromium (started before the server, so its own start is not counted) until every
view is drawn, or without a browser (``--no-browser``, the GPU machine) until a ``bokeh.client``
session holds the whole dashboard (and how much of that the client spent decoding it in Python,
BokehJS's work in a browser). ``--cold`` makes the server recompute the run (``--no-cache``);
otherwise the run comes from the cache (one untimed start fills it first). Prints a table and
writes JSON and Markdown under ``benchmarks/results/`` (``--out``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

from benchmarks.measure import describe_machine, machine_name, python_loop_ms
from tests.support.served import CHROMIUM, CHROMIUM_ARGS, ROOT, Server
from pipeline import backend

# Every view drawn: the selection marker, the histograms' bars and the recording's first drawing.
USABLE_JS = """() => {
    if (!window.Bokeh || !Bokeh.documents.length) return false;
    const doc = Bokeh.documents[0], get = (name) => doc.get_model_by_name(name);
    if (!get('ecg-version') || !get('ecg-lengths') || !get('ecg-signal')) return false;
    const bars = get('ecg-lengths').renderers[0].data_source.data.all;
    const signal = get('ecg-signal').renderers.slice(0, 2).map(r => r.data_source.data);
    return bars.length > 0 && (signal[0].image[0].length > 1 || signal[1].t.length > 0);
}"""


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
    kept open (as a browser tab is), holds the dashboard's recording and histogram views; and the
    seconds of that which the session spent decoding the server's messages into its document (what
    BokehJS does in a browser). (Opening a new session on every poll instead would load the server
    with progress pages.)"""
    import asyncio

    from tests.support.bokeh_session import ProtocolSession

    def shown(doc) -> bool:
        return all(doc.get_model_by_name(name) is not None for name in ("ecg-version", "ecg-lengths", "ecg-signal"))

    def left() -> float:
        return max(server.started + timeout - time.perf_counter(), 1.0)

    async def watch() -> float:
        session = ProtocolSession(server.url)
        await session.open(left())
        try:
            await session.wait_for(lambda: shown(session.doc), time.perf_counter(), left(), quiet=0.0)
            return session.decode_s
        finally:
            await session.close()

    decode_s = asyncio.run(watch())
    return time.perf_counter() - server.started, decode_s


def one_start(app_args: list[str], log: Path, browser, timeout: float) -> dict:
    server = Server(app_args, log)
    # The log is watched for the ready line while the page loads, so that ready_s is when the
    # server said so, not when the page had finished.
    with ThreadPoolExecutor(1) as watcher:
        ready = watcher.submit(server.wait_ready, timeout)
        try:
            return _time_start(server, ready, browser, timeout)
        finally:
            server.stop()


def _time_start(server: Server, ready, browser, timeout: float) -> dict:
    # The timed visitor is the server's first: probing the page itself would have made the
    # server build a dashboard nobody opens, ahead of the one being timed.
    server.wait_listening(timeout)
    http_s = time.perf_counter() - server.started
    if browser:
        usable_s, decoding = usable_in_browser(browser, server, timeout), {}
    else:
        usable_s, decode_s = usable_by_protocol(server, timeout)
        decoding = {"client_decode_s": round(decode_s, 3)}
    ready_s = ready.result()
    return {"http_s": round(http_s, 3), "ready_s": round(ready_s, 3), "usable_s": round(usable_s, 3),
            **decoding, "cached": "cached run" in server.log()}


def summarize(runs: list[dict]) -> dict:
    keys = [key for key in ("http_s", "ready_s", "usable_s", "client_decode_s", "python_loop_ms") if key in runs[0]]
    return {key: {"median": round(statistics.median(r[key] for r in runs), 2), "min": min(r[key] for r in runs),
                  "max": max(r[key] for r in runs)} for key in keys}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="fresh server starts to time (median of them)")
    p.add_argument("--cold", action="store_true", help="the server recomputes the run each time (--no-cache)")
    p.add_argument("--no-browser", action="store_true", help="usable = a bokeh.client session holds the dashboard")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder of the JSON and Markdown")
    p.add_argument("--label", default="", help="the machine's name in the result files (default: from the machine)")
    p.add_argument("app_args", nargs=argparse.REMAINDER, help="arguments for the app, after --")
    args = p.parse_args(argv)
    app_args = [a for a in args.app_args if a != "--"] + (["--no-cache"] if args.cold else [])
    logs = Path(tempfile.mkdtemp(prefix="serve-start-"))

    def measure(browser) -> dict:
        if not args.cold:     # fill the cache first (untimed)
            one_start(app_args, logs / "fill.log", browser, args.timeout)
        runs = []
        for k in range(args.runs):
            loop_ms = python_loop_ms()   # the cores' speed just before this start
            runs.append({**one_start(app_args, logs / f"run-{k}.log", browser, args.timeout), "python_loop_ms": loop_ms})
            print(f"run {k + 1}/{args.runs}: {runs[-1]}", file=sys.stderr, flush=True)
        return {"runs": runs, "summary": summarize(runs)}

    if args.no_browser:
        # The client's libraries load before any server starts, as the browser is started first:
        # loaded after the server listened, their imports (on the same cores) would be timed as
        # the server's start.
        from tests.support.bokeh_session import ProtocolSession  # noqa: F401
        from tests.support.served import register_panel_models

        register_panel_models()
        measured = measure(None)
    else:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                measured = measure(browser)
            finally:
                browser.close()
    machine = describe_machine(backend.has_gpu())
    result = {"benchmark": "serve_start", "date": date.today().isoformat(), "machine": machine,
              "app_args": app_args, "cold": args.cold, "usable_by": "protocol" if args.no_browser else "chromium",
              **measured}
    write(result, Path(args.out), args.label or machine_name(machine))
    return result


def write(result: dict, out: Path, label: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"serve-start-{label}-{'cold' if result['cold'] else 'cached'}-{result['date']}"
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    s = result["summary"]
    lines = [f"# Server start → usable dashboard ({'recomputed' if result['cold'] else 'cached'} run)", "",
             f"Machine: {result['machine'].get('cpu', '?')}, {result['machine'].get('cpu_cores', '?')} cores"
             + (f", {result['machine']['gpu']}" if result['machine'].get('gpu') else "")
             + f". App arguments: `{' '.join(result['app_args']) or '(defaults)'}`; usable = {result['usable_by']}.", "",
             "| from the command to | median (s) | min | max |", "| --- | --- | --- | --- |"]
    for key, name in (("http_s", "server listening (first HTTP answer)"), ("ready_s", "server ready (log)"),
                      ("usable_s", "usable dashboard")):
        lines.append(f"| {name} | {s[key]['median']:.2f} | {s[key]['min']:.2f} | {s[key]['max']:.2f} |")
    if "client_decode_s" in s:
        decode = s["client_decode_s"]
        lines += ["", f"Of the time to a usable dashboard, the protocol client spent {decode['median']:.2f} s "
                      f"({decode['min']:.2f}–{decode['max']:.2f}) decoding the server's messages into its own "
                      "document in Python, the work BokehJS does in a browser."]
    loop = s["python_loop_ms"]
    lines += ["", f"The cores' speed before each start (`benchmarks.measure.python_loop_ms`, lower is faster): "
                  f"median {loop['median']:.0f} ms ({loop['min']:.0f}–{loop['max']:.0f})."]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
