"""What a dashboard server was asked to show: its arguments (``panel serve dashboard/app.py --args
…``) or ``ECG_*`` environment variables, read into :class:`Settings` once per process
(:func:`server_settings`): by ``python -m dashboard.serve`` before it starts the run's process
(:mod:`dashboard.pipeline_process`, which is handed the request, not the arguments), else by the
first page (:mod:`dashboard.app`); every later page gets the same settings. Nothing a page sends
can change them. The request is built by :func:`pipeline.requests.run_request`, as the pipeline's
command line builds its own; this module imports nothing heavy.
"""
from __future__ import annotations

import argparse
import os
import threading
from dataclasses import dataclass, field

from pipeline.requests import RunRequest, run_request

BOARDS = ("auto", "bokeh", "cuxfilter")
ENV = {"input": "ECG_INPUT", "device": "ECG_DEVICE", "samples": "ECG_SAMPLES", "epochs": "ECG_EPOCHS",
       "out": "ECG_OUT", "board": "ECG_BOARD", "fs": "ECG_FS", "column": "ECG_COLUMN", "archive": "ECG_ARCHIVE",
       "reference": "ECG_REFERENCE"}


# --------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Settings:
    """What the server was asked to show: the pipeline request and the renderer."""

    request: RunRequest = field(default_factory=RunRequest)
    board: str = "auto"
    archive: str | None = None     # a batch's output folder: pick its recordings instead of running one


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would exit the server; raise instead
        raise ValueError(f"server arguments: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="panel serve dashboard/app.py --args", add_help=False)
    p.add_argument("--input", help="CSV, WFDB (.hea), .npy, .parquet, EDF or BDF (default: the synthetic recording)")
    p.add_argument("--device", help="auto, gpu or cpu")
    p.add_argument("--samples", help="length of the synthetic default recording")
    p.add_argument("--epochs", help="VAE training epochs")
    p.add_argument("--out", help="folder of cached runs (default: runs)")
    p.add_argument("--fs", help="sampling rate in Hz when the file has none")
    p.add_argument("--column", help="CSV/Parquet column or WFDB lead")
    p.add_argument("--board", help="linked charts drawn by: bokeh (default), cuxfilter (GPU runs) or auto")
    p.add_argument("--archive", help="folder of a batch (python -m pipeline batch … --out DIR): open its recordings")
    p.add_argument("--reference", help="reference beat model (.npz) that calibrates the outlier score "
                   "(default: the one shipped with the package)")
    p.add_argument("--no-cache", action="store_true", help="recompute even when a cached run exists")
    return p


def settings_from(argv: list[str] | None = None, environ: dict | None = None) -> Settings:
    """Settings from server arguments, falling back on ``ECG_*`` environment variables.

    Raises ValueError with one line naming the bad argument.
    """
    environ = os.environ if environ is None else environ
    args, unknown = _parser().parse_known_args(list(argv or []))
    if unknown:
        raise ValueError(f"server arguments: unknown {' '.join(unknown)!r} "
                         "(known: --input --device --samples --epochs --out --fs --column --board --archive --reference "
                         "--no-cache)")
    values = {}
    for name, var in ENV.items():
        value = getattr(args, name)
        if value is None and environ.get(var, "") != "":
            value = environ[var]
        values[name] = value

    def number(name, kind):
        value = values[name]
        if value is None:
            return None
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be a{'n integer' if kind is int else ' number'}; got {value!r} "
                             f"(from --{name} or {ENV[name]})") from None
        if number <= 0:
            raise ValueError(f"{name} must be positive; got {value!r} (from --{name} or {ENV[name]})")
        return number

    device = values["device"] or "auto"
    if device not in ("auto", "gpu", "cpu"):
        raise ValueError(f"device must be one of auto, gpu, cpu; got {device!r} (from --device or ECG_DEVICE)")
    board = values["board"] or "auto"
    if board not in BOARDS:
        raise ValueError(f"board must be one of {', '.join(BOARDS)}; got {board!r} (from --board or ECG_BOARD)")
    epochs = number("epochs", int)
    fs, samples = number("fs", float), number("samples", int)
    request = run_request(values["input"] or None, device=device, out=values["out"] or "runs", fs=fs,
                          column=values["column"], samples=samples, epochs=epochs, use_cache=not args.no_cache,
                          warm_up=False,  # the server waits for the result only
                          reference=values["reference"] or None)
    if request.reference is not None:
        from pipeline.reference_store import reference_digest

        reference_digest(request.reference)   # a missing or foreign file: one line now, not after the run
    return Settings(request=request, board=board, archive=values["archive"] or None)


_PARSED: dict[tuple, Settings | str] = {}
_PARSED_LOCK = threading.Lock()


def server_settings(argv: list[str]) -> Settings:
    """This process's settings for the server arguments ``argv`` and the ``ECG_*`` variables of
    its environment, parsed on the first call only: the server's start, every page and the run's
    adoption (:func:`dashboard.pipeline_process.for_request`) share one reading, a bad one's
    error included (raised again as the same one-line ValueError)."""
    key = (tuple(argv), tuple(os.environ.get(var, "") for var in ENV.values()))
    with _PARSED_LOCK:
        if key not in _PARSED:
            try:
                _PARSED[key] = settings_from(argv)
            except ValueError as err:
                _PARSED[key] = str(err)
        found = _PARSED[key]
    if isinstance(found, str):
        raise ValueError(found)
    return found
