"""Benchmark: server start → dashboard ready, and selection change → every view updated.

``python -m dashboard.bench_selection [--samples N] [--epochs E] [--device cpu] [--n 60] [--json out.json]``

1. Starts ``panel serve dashboard/app.py`` (``--warm``) and times (a) until the server logs that
   the run and the views are ready and (b) until a session pulled with ``bokeh.client`` holds the
   dashboard (its first page).
2. In this process, builds one session's dashboard (DataStore + board + views) into a Bokeh
   document, then applies ``--n`` selections (length ranges, latent boxes, score ranges,
   thresholds, time windows, clears) and times each from the change until every view has drawn
   it and the document patch for the browser is serialized.

Not a test: prints a table and writes JSON (``--json``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# --------------------------------------------------------------------------- the server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(port: int, app_args: list[str], python: str = sys.executable) -> list[str]:
    return [python, "-m", "panel", "serve", "dashboard/app.py", "--address", "127.0.0.1", "--port", str(port),
            "--allow-websocket-origin", f"127.0.0.1:{port}", "--num-procs", "1", "--warm", "--args", *app_args]


class Server:
    """``panel serve dashboard/app.py`` in a subprocess, its output in a log file."""

    def __init__(self, app_args: list[str], log_path: Path, port: int | None = None, env: dict | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/app"
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.started = time.perf_counter()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.proc = subprocess.Popen(server_command(self.port, app_args), cwd=ROOT, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_http(self, timeout: float) -> None:
        """Until the page answers HTTP 200 (the progress view, while the pipeline still runs)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"panel serve exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"no page at {self.url} after {timeout} s:\n{self.log()[-3000:]}")

    def wait_ready(self, timeout: float) -> float:
        """Seconds from start until the log says the dashboard is ready; raises on failure/timeout."""
        deadline = self.started + timeout
        while time.perf_counter() < deadline:
            text = self.log()
            if "ECG dashboard ready" in text:
                return time.perf_counter() - self.started
            if "pipeline failed" in text:
                raise RuntimeError("the pipeline failed:\n" + text[-3000:])
            if self.proc.poll() is not None:
                raise RuntimeError(f"panel serve exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.2)
        raise TimeoutError(f"not ready after {timeout:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def register_panel_models() -> None:
    """Import every Panel Bokeh model, so a bokeh.client session can decode the documents."""
    import importlib
    import pkgutil

    import panel.models

    for module in pkgutil.iter_modules(panel.models.__path__):
        with contextlib.suppress(Exception):
            importlib.import_module(f"panel.models.{module.name}")


def pull_dashboard(url: str) -> dict:
    """Pull a fresh session's document; describe it (needs the dashboard, not the progress view)."""
    from bokeh.client import pull_session
    from bokeh.models import Plot

    register_panel_models()
    started = time.perf_counter()
    with pull_session(url=url) as session:
        doc = session.document
        models = list(doc.models)
        classes = {c for m in models for c in (getattr(m, "css_classes", None) or [])}
        return {"seconds": time.perf_counter() - started, "models": len(models),
                "plots": sum(1 for _ in doc.select({"type": Plot})),
                "signal_figure": doc.get_model_by_name("ecg-signal") is not None,
                "dashboard": "ecg-dashboard" in classes, "error": "ecg-error" in classes,
                "views": sorted(c[len("ecg-view-"):] for c in classes if c.startswith("ecg-view-"))}


def http_get(url: str, timeout: float = 60.0) -> tuple[int, int]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, len(response.read())


# --------------------------------------------------------------------------- one session in-process
def load_shared(app_args: list[str]):
    """The run the server shows (from the cache the server just filled) and its shared data,
    prepared and warmed up as the server does it."""
    import panel as pn

    from dashboard import app, startup

    pn.extension("tabulator")
    settings = startup.settings_from(app_args, {})
    job = startup.PipelineJob(settings, prepare=app.prepare(settings), log=lambda m: None).start()
    progress = job.wait()
    if progress.state != "ready":
        raise RuntimeError(f"pipeline: {progress.error}")
    return job.run, job.result


class Session:
    """One session's dashboard in a Bokeh document, with its patches recorded."""

    def __init__(self, shared):
        from bokeh.document import Document
        from panel.io.state import set_curdoc

        from dashboard.app import make_board
        from dashboard.data_store import DataStore
        from dashboard.views import layout

        self.doc = Document()
        self.events: list = []
        self._curdoc = set_curdoc
        with set_curdoc(self.doc):
            started = time.perf_counter()
            self.store = DataStore(shared)
            self.board = make_board(self.store)
            self.body, self.views = layout(self.store, self.board)
            self.doc.add_root(self.body.get_root(self.doc))
            self.build_s = time.perf_counter() - started
        self.doc.callbacks.on_change(self.events.append)

    def apply(self, **changes) -> dict:
        """Apply a selection change; seconds until every view drew it and the patch is serialized."""
        from bokeh.protocol import Protocol

        self.events.clear()
        with self._curdoc(self.doc):
            started = time.perf_counter()
            self.store.update(**changes)
            updated = time.perf_counter()
            message = Protocol().create("PATCH-DOC", list(self.events)) if self.events else None
            done = time.perf_counter()
        sel = self.store.selection
        stale = [name for name, view in self.views.items()
                 if hasattr(view, "rendered") and name not in ("beat", "decoded") and view.rendered != sel.version]
        size = (len(message.content_json) + sum(len(b.to_bytes()) for b in message.buffers)) if message else 0
        return {"seconds": done - started, "update_s": updated - started, "serialize_s": done - updated,
                "patch_events": len(self.events), "patch_bytes": size, "stale_views": stale, "count": sel.count}


def selection_plan(shared, n: int, seed: int = 0) -> list[tuple[str, dict]]:
    """``n`` varied selection changes (each kind about equally often), reproducible."""
    import numpy as np

    rng = np.random.default_rng(seed)
    beats = shared.beats

    def span(column, width):
        lo_q = rng.uniform(0.02, 0.98 - width)
        return tuple(float(v) for v in np.quantile(beats[column], [lo_q, lo_q + width]))

    plan = []
    kinds = ["length", "latent", "score", "threshold", "window", "clear"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        if kind == "length":
            plan.append((kind, {"brush": {"length_s": span("length_s", rng.uniform(0.1, 0.5))}}))
        elif kind == "latent":
            plan.append((kind, {"brush": {"z1": span("z1", 0.5), "z2": span("z2", 0.5)}}))
        elif kind == "score":
            plan.append((kind, {"brush": {"score": span("score", rng.uniform(0.2, 0.6))}}))
        elif kind == "threshold":
            plan.append((kind, {"threshold": float(np.quantile(beats["score"], rng.uniform(0.9, 0.995)))}))
        elif kind == "window":
            t0 = float(rng.uniform(0, shared.duration_s * 0.7))
            plan.append((kind, {"time_range": (t0, t0 + shared.duration_s * 0.25)}))
        else:
            plan.append((kind, {"brush": {}, "time_range": None}))
    return plan


def percentile(values, q):
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(samples: list[float]) -> dict:
    ms = [s * 1000 for s in samples]
    return {"n": len(ms), "median_ms": round(statistics.median(ms), 1), "p95_ms": round(percentile(ms, 95), 1),
            "max_ms": round(max(ms), 1), "min_ms": round(min(ms), 1)}


def measure_selections(shared, n: int, check=None) -> dict:
    """Time ``n`` selection changes on a fresh in-process session (after one untimed warm-up)."""
    session = Session(shared)
    session.apply(brush={"length_s": shared.extent("length_s")})   # untimed: first-use costs
    session.apply(brush={})
    per_kind: dict[str, list[float]] = {}
    every, problems = [], []
    for kind, changes in selection_plan(shared, n):
        result = session.apply(**changes)
        per_kind.setdefault(kind, []).append(result["seconds"])
        every.append(result["seconds"])
        if result["stale_views"]:
            problems.append(f"{kind}: views not updated: {result['stale_views']}")
        if check is not None:
            problem = check(session)
            if problem:
                problems.append(f"{kind}: {problem}")
    return {"session_build_s": round(session.build_s, 3), "all": summarize(every),
            "per_kind": {k: summarize(v) for k, v in per_kind.items()}, "problems": problems[:20],
            "n_problems": len(problems), "board": session.board.name}


# --------------------------------------------------------------------------- report
def machine() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version(), "cpu": platform.processor()
            or platform.machine(), "cores": os.cpu_count()}
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text()
        found = re.search(r"model name\s*:\s*(.+)", text)
        if found:
            info["cpu"] = found.group(1).strip()
    with contextlib.suppress(Exception):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        if out:
            info["gpu"] = out.splitlines()[0]
    return info


def print_table(result: dict) -> None:
    run, start, sel = result["run"], result.get("startup", {}), result["selection"]
    print(f"\nmachine   {result['machine']['cpu']} · {result['machine']['cores']} cores"
          + (f" · {result['machine']['gpu']}" if "gpu" in result["machine"] else ""))
    print(f"run       {run['n_samples']:,} samples · {run['beats']:,} beats · device {run['device']} · "
          f"board {sel['board']}")
    if start:
        print(f"startup   server start → ready (pipeline{' cached' if start.get('cached') else ''} + views) "
              f"{start['ready_s']:.1f} s · → first dashboard page {start['first_page_s']:.1f} s")
    print(f"session   build {sel['session_build_s'] * 1000:.0f} ms")
    print(f"\n{'selection change → all views updated':<38}{'n':>4}{'median ms':>11}{'p95 ms':>9}{'max ms':>9}")
    for kind, s in {**sel["per_kind"], "ALL": sel["all"]}.items():
        print(f"  {kind:<36}{s['n']:>4}{s['median_ms']:>11.1f}{s['p95_ms']:>9.1f}{s['max_ms']:>9.1f}")
    if sel["n_problems"]:
        print(f"\nPROBLEMS ({sel['n_problems']}): " + "; ".join(sel["problems"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, help="synthetic recording length (default: the device's default)")
    p.add_argument("--epochs", type=int)
    p.add_argument("--device", default="cpu")
    p.add_argument("--board", default="auto")
    p.add_argument("--out", default="runs", help="run cache folder (shared with the server)")
    p.add_argument("--n", type=int, default=60, help="timed selection changes (>= 50 for a p95)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--no-server", action="store_true", help="skip the server start measurement")
    p.add_argument("--cold", action="store_true", help="the server recomputes the run (--no-cache)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the server to be ready")
    args = p.parse_args(argv)

    app_args = ["--device", args.device, "--board", args.board, "--out", args.out]
    if args.samples:
        app_args += ["--samples", str(args.samples)]
    if args.epochs:
        app_args += ["--epochs", str(args.epochs)]

    result: dict = {"machine": machine(), "args": vars(args)}
    if not args.no_server:
        log = Path(args.out) / "bench-server.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        server = Server(app_args + (["--no-cache"] if args.cold else []), log)
        try:
            ready = server.wait_ready(args.timeout)
            page = pull_dashboard(server.url)
            first_page = time.perf_counter() - server.started
            result["startup"] = {"ready_s": round(ready, 2), "first_page_s": round(first_page, 2),
                                 "cached": "cached run" in server.log(), "page": page}
        finally:
            server.stop()

    run, shared = load_shared(app_args)
    result["run"] = {"n_samples": run.report["input"]["n_samples"], "beats": len(run.beats),
                     "device": run.report["device"]["name"], "path": str(run.path),
                     "stages_s": run.report.get("stages_s", {})}
    result["selection"] = measure_selections(shared, args.n)
    print_table(result)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
        print(f"\nwrote {args.json}")
    return 1 if result["selection"]["n_problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
