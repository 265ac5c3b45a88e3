"""``python -m dashboard [PANEL SERVE OPTIONS] [--args APP ARGS]``: ``panel serve dashboard/app.py``
with the pipeline started before Panel is imported.

``panel serve`` imports Panel and Bokeh (~1.5 s on the GPU box) before it runs the app, which is
what starts the pipeline. Here the pipeline's thread starts first and looks for the run in the
cache (on a GPU, with CUDA's set-up) and reads it while this thread imports Panel and the
dashboard; Panel's own command then serves the app, which finds the job running
(:func:`dashboard.startup.process_job`). On the H200 a cached start became usable ~0.4 s sooner.
A run that must be computed waits for Panel instead: its imports (cuDF, PyTorch) compete with
Panel's for the interpreter, so starting it early gained nothing (interleaved cold starts: 12.9
against 12.7 s) and put the progress page a second later. The job prepares the views once the
dashboard is imported (their modules are this thread's to import).

NumPy and pandas, which both threads use, are imported here before the pipeline's thread starts,
so that the two threads never import the same package at the same time. With ``--archive`` (or
arguments the app rejects) nothing starts early: the app handles them as under ``panel serve``.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"


def split_arguments(argv: list[str]) -> tuple[list[str], list[str]]:
    """``panel serve`` options and the app's arguments (those after ``--args``)."""
    if "--args" in argv:
        at = argv.index("--args")
        return argv[:at], argv[at + 1:]
    return list(argv), []


def start_pipeline(app_args: list[str]) -> threading.Event | None:
    """Start this process's pipeline job now. Returns the event to set once ``dashboard.app`` is
    imported (the job prepares the views after it), or None when nothing was started."""
    import numpy  # noqa: F401  (see the module's docstring)
    import pandas  # noqa: F401

    from dashboard import startup

    try:
        settings = startup.settings_from(app_args)
    except ValueError:
        return None          # the app shows the error on its page, as under `panel serve`
    if settings.archive:
        return None
    app_imported = threading.Event()

    def prepare(run):
        from dashboard import app

        return app.prepare(settings)(run)

    startup.process_job(settings, prepare=prepare, hold=app_imported)
    return app_imported


def main(argv: list[str] | None = None) -> None:
    serve_args, app_args = split_arguments(sys.argv[1:] if argv is None else argv)
    app_imported = start_pipeline(app_args)
    from dashboard import app  # noqa: F401  (Panel, Bokeh and the views, while the job runs)

    if app_imported is not None:
        app_imported.set()
    from panel.command import main as panel_main

    sys.argv = ["panel", "serve", str(APP), *serve_args, "--args", *app_args]
    panel_main()


if __name__ == "__main__":
    main()
