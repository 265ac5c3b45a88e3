"""Command line: ``python -m pipeline run | batch | synth | reference | rescore | evaluate``.

Bad input (a file, or an option's value) ends with one line on stderr (``error: …``) and exit
status 2; warnings print as ``warning: …``.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from pipeline import PipelineWarning
from pipeline.config import VAEConfig


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        _check_run_options(args)
        return args.func(args)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _show_warning(message, category, filename, lineno, file=None, line=None):
    if issubclass(category, PipelineWarning):
        print(f"warning: {message}", file=sys.stderr)
    else:
        print(warnings.formatwarning(message, category, filename, lineno, line), file=sys.stderr, end="")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the pipeline on a recording (default: the synthetic one)")
    run.add_argument("input", nargs="?", help="CSV, WFDB (.hea), .npy, .parquet or EDF/EDF+/BDF (.edf, .bdf); "
                     "default: synthetic ECG "
                     "(20M samples on the GPU, 2M on the CPU)")
    _add_run_options(run)
    run.add_argument("--quiet", action="store_true", help="no progress bars")
    run.set_defaults(func=_cmd_run)

    batch = sub.add_parser("batch", help="run the pipeline on many recordings on a Dask cluster, one task each; "
                           "write <out>/archive.parquet")
    batch.add_argument("inputs", nargs="+", metavar="INPUT",
                       help="recording files, folders (their recordings) or glob patterns ('**' recurses)")
    _add_run_options(batch, synthetic=False)
    _add_cluster_options(batch)
    batch.set_defaults(func=_cmd_batch)

    synth = sub.add_parser("synth", help="write a synthetic ECG as CSV (+ <stem>.annotations.csv), or as EDF+/BDF+ "
                           "with the beats as annotations")
    synth.add_argument("output", help="path to write: .csv, or .edf / .bdf (EDF+ / 24-bit BDF+)")
    synth.add_argument("--samples", type=int, default=2_000_000)
    synth.add_argument("--fs", type=float, default=250.0)
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--heart-rate", type=float, default=70.0, help="mean heart rate, bpm")
    synth.add_argument("--pvc-fraction", type=float, default=0.015)
    synth.add_argument("--aberrant-fraction", type=float, default=0.01)
    synth.set_defaults(func=_cmd_synth)

    reference = sub.add_parser("reference", help="train a reference beat model (what calibrates the outlier "
                               "score) on the normal beats of annotated recordings or run folders")
    reference.add_argument("inputs", nargs="+", metavar="INPUT",
                           help="run folders (written by 'run' or 'batch'), annotated recordings, folders of "
                                "them or glob patterns; at least two recordings")
    reference.add_argument("--out", required=True, help="path of the reference to write (.npz, and .json beside it)")
    reference.add_argument("--labels", action="store_true", help="learn from the reviewer's labels saved by the "
                           "dashboard too (N is normal, any other label is not; they win over annotations)")
    reference.add_argument("--runs", default="runs", help="folder of cached runs for recordings (default: runs)")
    reference.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto")
    _add_cluster_options(reference)
    reference.set_defaults(func=_cmd_reference)

    rescore = sub.add_parser("rescore", help="score a finished run against another reference beat model "
                             "(only the reference's part is computed again); the run is written as a new cached run")
    rescore.add_argument("run_dir", metavar="RUN", help="a run folder (written by 'run' or 'batch')")
    rescore.add_argument("--reference", help="reference beat model (.npz written by the 'reference' command); "
                         "default: the one shipped with the package")
    rescore.set_defaults(func=_cmd_rescore)

    evaluate = sub.add_parser("evaluate", help="score detection and outliers on annotated WFDB records")
    evaluate.add_argument("directory", help="folder of WFDB records with .atr reference annotations")
    _add_run_options(evaluate)
    _add_cluster_options(evaluate)
    evaluate.add_argument("--no-neurokit", action="store_true", help="skip the NeuroKit2 comparison")
    evaluate.set_defaults(func=_cmd_evaluate)
    return parser


def _add_run_options(p: argparse.ArgumentParser, synthetic: bool = True) -> None:
    p.add_argument("--fs", type=float, help="sampling rate in Hz (default: from the file, else 250)")
    p.add_argument("--lead", help="lead to analyse, by name or 0-based index (default: MLII / lead II when a lead "
                   "is so named, else the first lead unless another's QRS is twice as clear or its beats hold "
                   "up clearly better against the other lead's); a repeated name is numbered: ECG #2")
    p.add_argument("--column", help="same as --lead (CSV/Parquet column name or index, WFDB lead)")
    p.add_argument("--device", choices=("auto", "gpu", "cpu"), default="auto",
                   help="auto = GPU when CUDA, CuPy and cuDF are usable")
    p.add_argument("--out", default="runs", help="folder of cached runs (default: runs)")
    if synthetic:
        p.add_argument("--samples", type=int, help="length of the synthetic default recording")
    p.add_argument("--epochs", type=int, default=VAEConfig.epochs, help="VAE training epochs")
    p.add_argument("--no-cache", action="store_true", help="recompute even when a cached run exists")
    p.add_argument("--reference", help="reference beat model (.npz written by the 'reference' command) that "
                   "calibrates the outlier score; default: the one shipped with the package")


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cluster", default="auto",
                   help="auto (local-cuda with a GPU, else local) | local (one process per worker) | "
                        "local-cuda (one worker per GPU) | a scheduler address such as tcp://host:8786")
    p.add_argument("--workers", type=int, help="local: worker processes (default: one per core, at most one per "
                   "recording); local-cuda: GPUs to use (default: all visible)")
    p.add_argument("--per-gpu", type=int, help="local-cuda: worker processes sharing each GPU, so that one "
                   "recording trains while the next loads and the last is written (default: 4, 8 while a CUDA MPS daemon "
                   "runs; fewer where there are under 2 cores for each)")
    p.add_argument("--threads", type=int, help="thread budget of each worker (PyTorch, Numba, OpenMP); default: "
                   "cores // workers on a local cluster, the workers' own settings on a remote one")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _cluster_options(args) -> dict:
    return {"cluster": args.cluster, "workers": args.workers, "threads": args.threads, "per_gpu": args.per_gpu}


def _check_run_options(args) -> None:
    """Refuse option values that would run something else than asked, before any work: an
    untrained model (--epochs 0), the default recording instead of an empty one (--samples 0), a
    sampling rate no ECG has."""
    if getattr(args, "epochs", None) is not None and args.epochs < 1:
        raise ValueError(f"--epochs must be at least 1 (the VAE's training epochs); got {args.epochs}")
    if getattr(args, "samples", None) is not None and args.samples < 1:
        raise ValueError(f"--samples must be a positive number of samples; got {args.samples}")
    if getattr(args, "input", None):           # run: a missing file or a folder, before any progress bar
        from pipeline.digests import recording_files

        recording_files(Path(args.input))
    if getattr(args, "reference", None) is not None:
        from pipeline.reference_store import reference_digest

        reference_digest(args.reference)
    if getattr(args, "fs", None) is not None and hasattr(args, "epochs"):  # run, batch, evaluate (synth checks its own)
        from pipeline.readers import check_sampling_rate

        check_sampling_rate(args.fs, _inputs_named(args), "--fs")


def _inputs_named(args) -> str:
    """The inputs of a run, batch or evaluate command, as an error message names them."""
    if hasattr(args, "inputs"):
        first = Path(args.inputs[0]).name
        return first if len(args.inputs) == 1 else f"{first} and {len(args.inputs) - 1} more"
    if hasattr(args, "directory"):
        return Path(args.directory).name or str(args.directory)
    return Path(args.input).name if args.input else "the synthetic recording"


def _request(args, input_path):
    from pipeline.requests import run_request

    return run_request(input_path, device=args.device, out=args.out, fs=args.fs, lead=args.lead,
                       column=args.column, samples=getattr(args, "samples", None), epochs=args.epochs,
                       use_cache=not args.no_cache, reference=args.reference)


# --------------------------------------------------------------------------- run
def _cmd_run(args) -> int:
    from pipeline.run import run_pipeline

    with _ProgressBars(enabled=not args.quiet) as bars:
        run = run_pipeline(_request(args, args.input), progress=bars.update)
    print(summary(run))
    return 0


class _ProgressBars:
    """One tqdm bar per stage, on stderr."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.stage = enabled, None, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._close()

    def _close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def update(self, stage: str, fraction: float, message: str) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        from pipeline.stages import STAGES

        if stage != self.stage:
            self._close()
            self.stage = stage
            self.bar = tqdm(total=100, desc=f"{STAGES[stage]:<34}", file=sys.stderr, leave=True,
                            bar_format="{desc} {percentage:3.0f}%|{bar:30}| {elapsed} {postfix}")
        self.bar.n = int(round(100 * fraction))
        if message and message != STAGES[stage]:
            self.bar.set_postfix_str(message, refresh=False)
        self.bar.refresh()


def summary(run) -> str:
    """A human summary of a run: input, counts, per-stage time, memory, where it is."""
    r = run.report
    inp, counts = r["input"], r["counts"]
    beats = run.beats
    lines = [
        f"run        {run.path}{'  (cached)' if run.cached else ''}",
        f"input      {inp['path']}  [{inp['channel']}]  {inp['n_samples']:,} samples at {inp['fs']:g} Hz "
        f"({inp['duration_s'] / 3600:.2f} h)",
        f"lead       {inp['channel']}: {inp.get('lead_reason', 'as given')}" + _other_lead_note(inp, counts),
        f"device     {r['device']['name']}" + (f" ({r['device']['gpu']})" if "gpu" in r["device"] else ""),
        f"beats      {counts['beats']:,} found; "
        f"{counts['train']:,} train / {counts['test']:,} held out",
        f"lengths    median {beats['length_s'].median() * 1000:.0f} ms "
        f"({60 / beats['length_s'].median():.0f} bpm)",
        "stages     " + "  ".join(f"{k} {v * 1000:.0f} ms" if v < 1 else f"{k} {v:.2f} s"
                                  for k, v in r["stages_s"].items()),
        f"segment    {r['segmentation_s'] * 1000:.1f} ms (Ricker + NMS + episodes + lengths + embed + quality)",
    ]
    if run.episodes is not None:
        lines.insert(5, "episodes   " + _episodes_line(run.episodes, counts.get("low_quality", 0)))
    mem = r["memory"]
    lines.append("memory     " + (f"GPU peak {mem['gpu_peak_bytes'] / 2**20:.0f} MiB, " if "gpu_peak_bytes" in mem else "")
                 + f"host peak RSS {mem['host_peak_rss_bytes'] / 2**20:.0f} MiB")
    from pipeline.quality import low_quality

    from pipeline.calibrate import OUTLIER_SCORE, explain_calibrated, is_outlier

    ranked = beats[~low_quality(beats["quality"])]   # artefacts are no findings
    top = ranked.nlargest(5, "score")
    flagged = int(is_outlier(ranked["score"]).sum())
    lines.append(f"outliers   {flagged:,} beat{'s' if flagged != 1 else ''} with a calibrated score of "
                 f"{OUTLIER_SCORE:g} or more ({r['reference']['description']}); highest: "
                 + ", ".join(f"beat {b.beat_id} at {b.time_s:.1f} s ({b.score:.1f})" for b in top.itertuples()))
    lines.append("why        " + "\n           ".join(f"beat {row['beat_id']}: {explain_calibrated(row)}"
                                                       for _, row in top.iterrows()))
    if "abnormal" in beats:
        from pipeline.metrics import auroc

        lines.append(f"reference  {int(beats['abnormal'].sum()):,} abnormal beats; outlier AUROC "
                     f"{auroc(beats['score'], beats['abnormal']):.3f}")
    return "\n".join(lines)


def _other_lead_note(inp: dict, counts: dict) -> str:
    """Which lead was read beside the analysed one, and the beats it gave (runs before it: '')."""
    if not inp.get("other_lead"):
        return ""
    found = counts.get("from_other_lead", 0)
    return (f"; {inp['other_lead']} read beside it" +
            (f", {found:,} beat{'s' if found != 1 else ''} found only there" if found else ", no beat missing"))


def _episodes_line(episodes, low_quality: int) -> str:
    """Pauses (with the longest), flutter and noise stretches, low-quality beats, in words."""
    from pipeline.tables import doubtful_pauses

    def when(seconds: float) -> str:
        return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{seconds % 60:04.1f}"

    parts = []
    pauses = episodes[episodes["kind"] == "pause"]
    if len(pauses):
        longest = pauses.loc[(pauses["end_s"] - pauses["start_s"]).idxmax()]
        doubtful = int(doubtful_pauses(pauses).sum())
        parts.append(f"{len(pauses):,} pause{'s' if len(pauses) != 1 else ''} of 2 s or more (longest "
                     f"{longest['end_s'] - longest['start_s']:.1f} s at {when(longest['start_s'])}"
                     + (f"; {doubtful:,} doubtful, in noise or lost signal" if doubtful else "") + ")")
    for kind, name in (("flutter", "ventricular flutter/fibrillation"), ("noise", "noise"), ("lost", "signal lost")):
        chosen = episodes[episodes["kind"] == kind]
        if len(chosen):
            parts.append(f"{name} {(chosen['end_s'] - chosen['start_s']).sum():.0f} s in {len(chosen):,} "
                         f"episode{'s' if len(chosen) != 1 else ''}")
    parts.append(f"{low_quality:,} low-quality beat{'s' if low_quality != 1 else ''} left out of the ranking")
    return "; ".join(parts) if len(parts) > 1 else "no pause, flutter, noise or lost signal; " + parts[0]


# --------------------------------------------------------------------------- batch
def _cmd_batch(args) -> int:
    """Exit status 0 when every recording finished, 1 when some failed (each with its error)."""
    from pipeline import batch

    paths = batch.find_recordings(args.inputs, exclude=args.out)
    jobs = [batch.Job(_request(args, str(path))) for path in paths]
    result = batch.run_batch(jobs, **_cluster_options(args), progress=not args.quiet)
    print(batch.format_summary(result))
    return 1 if result.failed else 0


# --------------------------------------------------------------------------- synth, evaluate
def _cmd_synth(args) -> int:
    from pipeline import synth

    cfg = synth.SynthConfig(n_samples=args.samples, fs=args.fs, seed=args.seed, heart_rate=args.heart_rate,
                            pvc_fraction=args.pvc_fraction, aberrant_fraction=args.aberrant_fraction)
    ecg = synth.synthesize(cfg)
    if Path(args.output).suffix.lower() in (".edf", ".bdf"):
        from pipeline.edf import write_edf

        path = write_edf(args.output, ecg.signal, ecg.fs, annotations=(ecg.r_peaks, ecg.symbols))
        print(f"wrote {path} ({args.samples:,} samples, {len(ecg.r_peaks):,} beats as EDF+ annotations)")
        return 0
    path = synth.write_csv(ecg, Path(args.output))
    print(f"wrote {path} ({args.samples:,} samples, {len(ecg.r_peaks):,} beats) and {synth.annotations_path(path)}")
    return 0


def _cmd_reference(args) -> int:
    """Train and write a reference from run folders, and from recordings run first (cached in
    --runs), on one Dask cluster: the batch runs the recordings, then the workers read and prepare
    every run for training while this process places the centroids and fits the tables. Beats
    count as normal by their reference annotations (AAMI class N) and, with --labels, by the
    reviewer's labels, which win; a recording with neither counts every beat as normal, with a
    warning."""
    from pipeline import batch, reference
    from pipeline.reference_training import check_recordings
    from pipeline.requests import RunRequest

    folders = [Path(i) for i in args.inputs if (Path(i) / "report.json").is_file()]
    others = [i for i in args.inputs if not (Path(i) / "report.json").is_file()]
    jobs = [batch.Job(RunRequest(input=str(path), device=args.device, out=args.runs))
            for path in (batch.find_recordings(others, exclude=args.runs) if others else [])]
    check_recordings(len(folders) + len(jobs))
    with batch.open_cluster(args.cluster, args.workers, device=args.device, max_workers=len(folders) + len(jobs),
                            threads=args.threads, per_gpu=args.per_gpu) as cluster:
        runs = folders + _reference_runs(jobs, cluster, progress=not args.quiet)
        with _ProgressBars(enabled=not args.quiet) as bars:
            trained = reference.train_reference(runs, reviewer_labels=args.labels, cluster=cluster,
                                                progress=lambda f, m: bars.update("score", f, m))
    path = reference.save_reference(trained, Path(args.out))
    print(f"wrote {path} and {path.with_suffix('.json').name}: {reference.describe(trained)}")
    return 0


def _reference_runs(jobs: list, cluster, progress: bool) -> list[Path]:
    """The run folders of recordings given to ``reference``, run by the batch on ``cluster``; the
    first failure is the command's one-line error."""
    from pipeline import batch

    if not jobs:
        return []
    result = batch.run_batch(jobs, cluster=cluster, progress=progress, write_archive=False)
    if result.failed:
        row = result.failed[0]
        raise ValueError(f"{row['name']}: {row['error']}" + (f" (and {len(result.failed) - 1} more failed)"
                                                            if len(result.failed) > 1 else ""))
    return [Path(row["run_dir"]) for row in result.rows]


def _cmd_rescore(args) -> int:
    """Rescore a run folder against a reference; print where the rescored run is and its outliers
    before and after. Exit status 1 when it could not be written (the runs folder is read-only)."""
    from pipeline import results
    from pipeline.calibrate import is_outlier
    from pipeline.quality import low_quality
    from pipeline.rescore import rescore_run

    def outliers(beats) -> int:
        return int(is_outlier(beats["score"][~low_quality(beats["quality"])]).sum())

    run = rescore_run(args.run_dir, args.reference)       # checks the run folder and the reference first
    before = results.load_run(Path(args.run_dir))
    ref = run.report["reference"]
    was = f" (was {outliers(before.beats):,})"
    saved = run.report.get("rescored", {}).get("saved", True)
    where = f"{run.path}{'  (cached)' if run.cached else ''}" if saved else "not written"
    print(f"run        {where}\nreference  {ref['file'].get('name', '?')}: {ref['description']}\n"
          f"outliers   {outliers(run.beats):,}{was}")
    return 0 if saved else 1


def _cmd_evaluate(args) -> int:
    from pipeline import evaluate

    table = evaluate.evaluate_directory(Path(args.directory), lambda path: _request(args, str(path)),
                                        neurokit=not args.no_neurokit, **_cluster_options(args),
                                        progress=not args.quiet)
    print(evaluate.format_table(table))
    failed = table.attrs.get("failed", {})
    for record, error in failed.items():
        print(f"error: {record}: {error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
