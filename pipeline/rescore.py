"""A finished run scored against another reference beat model: only the reference's part is
computed again (no segmentation, no training), and the rescored run is cached as ``run
--reference`` would cache it.

See Also
--------
pipeline.run.run_pipeline : what made the run.
dashboard.reference_choice : the dashboard's rescore.
"""
from __future__ import annotations

import json
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from pipeline import results
from pipeline.reference_store import report_entry
from pipeline.run import cache_key


def _report_key(report: dict, reference: str) -> str:
    """The key :func:`pipeline.run.run_key` gives the recording, device and settings that
    ``report`` records, scored against the reference whose digest is ``reference`` (the settings
    as the run used them: a setting added since changes no key of an earlier run)."""
    inp, cfg = report["input"], report["config"]
    digest = {"sha256": inp["sha256"], "annotations": inp.get("annotations_sha256")}
    return cache_key(digest, report["device"]["name"], cfg.get("fs_override"), cfg.get("column"), cfg["signal"],
                     cfg["vae"], reference)


def rescore_run(run_dir: Path | str, reference: Path | str | None = None) -> results.RunResult:
    """A finished run scored against another reference beat model, nothing else computed again.

    Only the reference's part is recomputed (:func:`pipeline.reference_score.score_reference` on
    the run's embedded beats and fiducials: no training, no segmentation), and the beats table's
    ``score`` and its components (:data:`pipeline.calibrate.COLUMNS`) are replaced. The rescored run
    is written beside ``run_dir`` under the key that :func:`pipeline.run.run_key` gives this recording and these
    settings with that reference, so a later ``run --reference`` of them finds it in the cache; its
    report names the reference and, under ``rescored``, the run it came from. ``run_dir`` itself is
    never touched. An intact run under that key is read, not computed again (``cached`` True); the
    reference that scored ``run_dir`` gives ``run_dir``'s own run. When the runs folder cannot be
    written, the rescored run is returned in memory with a warning (``report["rescored"]["saved"]``
    False; its ``path`` is then ``run_dir``'s, whose other files it shares).

    Parameters
    ----------
    run_dir : a run directory written by ``run``/``batch`` (checked against its checksums).
    reference : a reference's ``.npz`` (``python -m pipeline reference``); None: the shipped one.

    Raises ValueError when ``run_dir`` is no intact run or the reference cannot be read.

    See Also
    --------
    pipeline.run.run_pipeline : what made the run.
    pipeline.results.write_rescored : writes the rescored run.
    """
    from pipeline.reference_score import score_reference
    from pipeline.reference_store import load_reference

    source = Path(run_dir)
    problem = results.run_problem(source)
    if problem is not None:
        raise ValueError(f"{results.printable_path(source)} is not a finished run ({problem})")
    report = json.loads((source / results.REPORT).read_text())
    population = load_reference(reference)       # read and checked even for a cached run: a damaged file is said so
    digest = population.meta["file"]["sha256"]
    if digest == report.get("reference", {}).get("file", {}).get("sha256"):
        return results.load_run(source)                          # scored with that reference already
    key = _report_key(report, digest)
    if (found := results.find_cached(source.parent, key)) is not None:
        return results.load_run(found)
    run = results.load_run(source)
    started = time.perf_counter()
    rows = np.asarray(run.embeddings, dtype=np.float32)
    pre = int(round(report["config"]["signal"]["pre_fiducial"] * rows.shape[1]))
    scored = score_reference(rows, run.beats["fiducial"].to_numpy(), run.fs, pre, population)
    beats = run.beats.copy()
    beats["score"] = np.asarray(scored.score, dtype=np.float32)
    for name, values in scored.columns().items():
        beats[name] = np.asarray(values, dtype=np.float32)
    report = dict(report, key=key, reference=report_entry(population), rescored={
        "from_key": report.get("key", source.name), "from_reference": report.get("reference"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.perf_counter() - started, 6), "saved": True})
    try:
        path = results.write_rescored(source.parent, key, source=source, report=report, beats=beats)
    except OSError as err:      # a read-only runs folder: the scores still hold, for as long as they are kept
        from pipeline import PipelineWarning

        warnings.warn(f"the rescored run could not be written to {results.printable_path(source.parent)} "
                      f"({err.strerror or err}); it is kept in memory only", PipelineWarning, stacklevel=2)
        report["rescored"] = dict(report["rescored"], saved=False)
        run.report, run.beats, run.cached = report, beats, False
        return run
    rescored = results.load_run(path)
    rescored.cached = False
    return rescored
