"""The installed command: ``ecg run | batch | evaluate | synth | reference | rescore | serve``.

Every subcommand but ``serve`` is the pipeline's command line, unchanged: ``ecg run X`` is
``python -m pipeline run X`` (:func:`pipeline.__main__.main`, which owns their options, their
help and their errors; a subcommand added there is an ``ecg`` subcommand at once). ``ecg serve
ARGS`` is ``python -m dashboard.serve dashboard/app.py ARGS`` (:func:`dashboard.serve.main`), with
the app's file taken from the installed package rather than the working directory, so the command
works from any folder. It lives in ``dashboard`` because it names both halves, and the pipeline
never imports the dashboard.

Exit status: the subcommand's own; 2 for no subcommand (after the help) or an unknown one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import dashboard

PROG = "ecg"
SERVE_HELP = "serve the dashboard on http://127.0.0.1:5006/app (panel serve options; the app's after --args)"
SERVE_USAGE = f"""usage: {PROG} serve [PANEL-SERVE OPTIONS] [--args APP OPTIONS]

Start the dashboard: the pipeline runs once (or a cached run is read) and every browser session
gets cross-filtered views of it. Same as `python -m dashboard.serve dashboard/app.py ...`: it
listens on 127.0.0.1 unless --address says otherwise.

examples:
  {PROG} serve                                    http://127.0.0.1:5006/app, synthetic recording
  {PROG} serve --port 5007 --args --input rec.hea --device cpu
  {PROG} serve --args --archive runs              the recordings of `{PROG} batch ... --out runs`

app options (after --args; or the ECG_* environment variables):
"""


def app_path() -> Path:
    """The dashboard's Panel app, where the installed package has it."""
    return Path(dashboard.__file__).with_name("app.py")


def pipeline_commands() -> dict[str, str]:
    """The pipeline's subcommands and their one-line help, as its own parser declares them."""
    from pipeline.__main__ import _parser

    for action in _parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: helps.get(name, "") for name in action.choices}
    return {}


def help_text() -> str:
    """``ecg --help``: every subcommand with its one line."""
    commands = {**pipeline_commands(), "serve": SERVE_HELP}
    width = max(map(len, commands))
    lines = [f"usage: {PROG} COMMAND [ARGS...]", "",
             "Find, inspect, judge and label abnormal heartbeats in long ECG recordings.", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, text in commands.items()]
    lines += ["", f"`{PROG} COMMAND --help` gives a command's options."]
    return "\n".join(lines)


def serve(argv: list[str]) -> int:
    """``ecg serve ARGS``: the dashboard's server, as ``python -m dashboard.serve`` starts it."""
    if argv[:1] in (["-h"], ["--help"]):
        print(_serve_help())
        return 0
    from dashboard import serve as server

    return server.main([str(app_path()), *argv])


def _serve_help() -> str:
    from panel.command.serve import Serve

    from dashboard.settings import _parser as app_parser

    app = app_parser().format_help().split("\n\n", 1)[-1].split("\n", 1)[-1]   # its options alone
    parser = argparse.ArgumentParser(prog=f"{PROG} serve", add_help=False)
    Serve(parser=parser)
    panel = parser.format_help().split("\noptions:\n", 1)[-1]   # its options alone (the app's file is given)
    return f"{SERVE_USAGE}{app.rstrip()}\n\npanel serve options:\n{panel.rstrip()}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(help_text(), file=sys.stderr)
        return 2
    command = argv[0]
    if command in ("-h", "--help", "help"):
        print(help_text())
        return 0
    if command == "--version":
        print(f"{PROG} {dashboard_version()}")
        return 0
    if command == "serve":
        return serve(argv[1:])
    known = pipeline_commands()
    if command not in known:
        print(f"error: unknown command {command!r}; choose from {', '.join([*known, 'serve'])} "
              f"(`{PROG} --help`)", file=sys.stderr)
        return 2
    from pipeline.__main__ import main as pipeline_main

    return pipeline_main(argv)


def dashboard_version() -> str:
    from pipeline import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
