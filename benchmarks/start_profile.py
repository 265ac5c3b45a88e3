"""Where a server start's time goes, phase by phase, in one fresh process.

    python -m benchmarks.start_profile [--top 12] [-- APP ARGS ...]

Does what ``panel serve dashboard/app.py`` does before its first page is usable, in order, and
times each phase under cProfile: importing Panel and the dashboard; the pipeline job (a cached
run unless the app arguments say ``--no-cache``); preparing the shared data of the board; building
and serializing a first session's document. Prints each phase's seconds and the functions that
took most of it (cumulative). Run it once first so the run is in the cache.

The phases run one after the other in this process, so they show what each costs, not how long a
served start takes: ``python -m dashboard.serve`` runs the pipeline in a child process while it
imports Panel (``dashboard.pipeline_process``), so there a cold start's run and the server's
imports overlap. ``benchmarks.serve_start`` times the served start itself.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time


def profiled(name: str, top: int, work):
    """Run ``work()`` under cProfile; print its seconds and its ``top`` cumulative entries."""
    profile = cProfile.Profile()
    started = time.perf_counter()
    result = profile.runcall(work)
    seconds = time.perf_counter() - started
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(top)
    lines = [line for line in text.getvalue().splitlines() if line.strip()]
    table = lines[next(i for i, line in enumerate(lines) if "ncalls" in line):]
    print(f"\n=== {name}: {seconds:.2f} s", flush=True)
    print("\n".join(table), flush=True)
    return result, seconds


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--top", type=int, default=12, help="functions listed per phase")
    p.add_argument("app_args", nargs=argparse.REMAINDER, help="arguments for the app, after --")
    args = p.parse_args(argv)
    app_args = [a for a in args.app_args if a != "--"]
    started = time.perf_counter()
    seconds = {}

    def import_panel():
        import panel  # noqa: F401

    def import_dashboard():
        from dashboard import app  # noqa: F401

    _, seconds["import panel"] = profiled("import panel", args.top, import_panel)
    _, seconds["import dashboard"] = profiled("import dashboard", args.top, import_dashboard)
    from dashboard import app, startup

    settings = startup.settings_from(app_args)
    from pipeline.run import run_pipeline

    run, seconds["pipeline"] = profiled("pipeline job", args.top, lambda: run_pipeline(settings.request))
    shared, seconds["prepare"] = profiled("prepare the views", args.top, lambda: app.prepare(settings)(run))

    def first_session():
        from benchmarks.inprocess import InProcessSession

        return InProcessSession(shared)

    session, seconds["first session"] = profiled("first session's document", args.top, first_session)
    seconds["total"] = time.perf_counter() - started
    print(f"\nfirst session: {session.models} models, {session.doc_bytes / 1e6:.1f} MB")
    print("seconds: " + ", ".join(f"{name} {value:.2f}" for name, value in seconds.items()))
    return seconds


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
