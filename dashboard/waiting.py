"""What a page shows before its dashboard: the shared run's progress while the pipeline runs, or
the error that stopped it, with the command and settings that led to it (all of it escaped: the
arguments, the environment and the message come from outside the code).

See Also
--------
dashboard.app.App : shows one or the other until the run is ready.
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import panel as pn

from dashboard import startup
from dashboard.spec import STYLESHEET, hms
from dashboard.views import escape, html


class ProgressView:
    """Stage, percent and elapsed time of the shared run; updated in place on every poll (no new
    models while the page waits, so nothing for the browser to re-create)."""

    def __init__(self):
        self.stage = html("", margin=(0, 10))
        self.bar = pn.indicators.Progress(value=1, max=100, sizing_mode="stretch_width", bar_color="primary",
                                          margin=(10, 10))
        self.numbers = html("", margin=(0, 10))
        self.done = html("", margin=(10, 10))
        self.panel = pn.Column(
            html("<div class='ecg-progress-title'>Preparing the recording…</div>"
                 "<div class='ecg-muted'>The pipeline runs once for this server; the dashboard appears here "
                 "when it is ready.</div>", margin=(10, 10)),
            self.stage, self.bar, self.numbers, self.done, css_classes=["ecg-card", "ecg-progress"],
            stylesheets=[STYLESHEET], sizing_mode="stretch_width", margin=(20, 10), max_width=900)

    def show(self, progress: startup.Progress) -> None:
        message = f" — {escape(progress.message)}" if progress.message else ""
        done = "".join(f"<div>✓ {escape(label)} <b>{seconds:.1f} s</b></div>" for label, seconds in progress.done)
        self.stage.object = f"<div class='ecg-progress-stage'>{escape(progress.label)}{message}</div>"
        self.bar.value = max(progress.percent, 1)
        self.numbers.object = (f"<div class='ecg-muted'><b>{progress.percent}%</b> · elapsed "
                               f"{hms(progress.elapsed_s, 0)}</div>")
        self.done.object = f"<div class='ecg-progress-done'>{done}</div>"


def launch_command(argv: list[str] | None = None) -> tuple[str, str]:
    """(the command that started this server process, as near as the process knows it; the app's
    own arguments, those after ``--args``, which ``./run.sh`` passes on as they were typed)."""
    argv = list(getattr(sys, "orig_argv", sys.argv) if argv is None else argv)
    app_args = argv[argv.index("--args") + 1:] if "--args" in argv else []
    shown = ["python" if argv and Path(argv[0]).name.startswith("python") else argv[0], *argv[1:]] if argv else []
    if len(shown) > 1 and Path(shown[1]).name in ("panel", "bokeh"):     # python …/bin/panel serve …
        shown = [Path(shown[1]).name, *shown[2:]]
    return shlex.join(shown), shlex.join(app_args)


def error_view(message: str, argv: list[str] | None = None, environ: dict | None = None) -> list:
    """The error page: the error in plain words, then the command and settings that led to it."""
    command, app_args = launch_command(argv)
    environ = os.environ if environ is None else environ
    variables = " ".join(f"{name}={shlex.quote(environ[name])}" for name in startup.ENV.values()
                         if environ.get(name, "") != "")
    asked = (f"<div>The server's arguments: <code>{escape(app_args)}</code></div>" if app_args else
             "<div>The server was given no arguments of its own (<code>--args …</code>).</div>")
    env = f"<div>Settings from the environment: <code>{escape(variables)}</code></div>" if variables else ""
    return [
        html("<div class='ecg-error-title'>The pipeline could not run</div>", margin=(10, 10)),
        # (An Alert renders Markdown: inside a <div>, an HTML block, its text is left as it is.)
        pn.pane.Alert(f"<div>{escape(message)}</div>", alert_type="danger", sizing_mode="stretch_width",
                      margin=(10, 10)),
        html(f"<div class='ecg-error-command'>{asked}{env}"
             f"<div>The command that started it: <code>{escape(command)}</code></div></div>", margin=(0, 10)),
        html("<div class='ecg-muted'>Fix the input or the arguments and start the server again, for example "
             "<code>./run.sh serve --input recording.csv</code> (a CSV, WFDB .hea, .npy, .parquet or .edf recording). "
             "For a folder of recordings, analyse them all with <code>python -m pipeline batch FOLDER --out "
             "runs</code> and open them with <code>./run.sh serve --archive runs</code>.</div>", margin=(6, 10)),
    ]
