"""VAE training speed and quality: plain steps against CUDA-graph-captured steps, on realistic beats.

    python -m benchmarks.train_speed                       # GPU: 20M-sample synthetic default
    python -m benchmarks.train_speed --batches 2048,4096,8192 --repeats 3
    python -m benchmarks.train_speed --device cpu --samples 2M   # the CPU path (plain only)
    python -m benchmarks.train_speed --run runs/<key>      # beats of a finished run

The beats are the seeded synthetic recording's, cut by the pipeline's segmentation, or a run's; the
injected abnormal beats (V, A, Q) give the outlier AUROC. For each batch size and kind of step
(``plain``; ``captured``, GPU only; ``before``: the schedule the current one replaced) it prints the
median and p95 of 200 single steps (CUDA events on the GPU, wall clock on the CPU), ``fit_vae``'s
wall time (median of ``--repeats`` after a warm-up fit), epochs, final loss and AUROC, and how
closely captured and plain training agree. Exit status 1 on any error, a capture that falls back to
plain steps, a disagreement, or a missed target (captured training ≤ 1 s, AUROC ≥ 0.99 at the
default batch); the last line is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from benchmarks.measure import describe_machine
from benchmarks.recordings import parse_size

TARGETS = (("training (captured, 20M default) <= 1 s", "train_s_median", 1.0, False),
           ("outlier AUROC (synthetic 20M) >= 0.99", "auroc", 0.99, True))
ABNORMAL = ("V", "A", "Q")
BEFORE = dict(batch_size=2048, learning_rate=4e-3, tolerance=0.0, cuda_graph=False)  # the schedule this replaced


def synthetic_beats(samples: int, seed: int = 0):
    """Rows (n, width) float32 and each beat's symbol ('' when no injected beat is within 150 ms)."""
    from benchmarks.contenders import segment
    from pipeline import synth
    from pipeline.config import SignalConfig

    ecg = synth.synthesize(synth.SynthConfig(n_samples=samples, seed=seed))
    _, beats = segment(ecg.signal, ecg.fs, SignalConfig())
    right = np.clip(np.searchsorted(ecg.r_peaks, beats.fiducial), 1, len(ecg.r_peaks) - 1)
    nearest = np.where(np.abs(ecg.r_peaks[right - 1] - beats.fiducial) <= np.abs(ecg.r_peaks[right] - beats.fiducial),
                       right - 1, right)
    close = np.abs(ecg.r_peaks[nearest] - beats.fiducial) <= 0.15 * ecg.fs
    return beats.rows, np.where(close, ecg.symbols[nearest], "")


def run_beats(path: Path):
    """Rows and reference symbols of a finished run directory (its input must have been annotated)."""
    from pipeline import results

    run = results.load_run(path)
    if "label" not in run.beats:
        raise ValueError(f"{path}: the run's input has no reference annotations, so there is no AUROC to measure")
    return np.ascontiguousarray(run.embeddings), run.beats["label"].to_numpy().astype(str)


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def make_step(rows, is_train, cfg, capture: bool = False, seed: int = 1):
    """The training step :func:`pipeline.train.fit_vae` builds, on a fresh model: ``(step, batches, plan)``."""
    import torch

    from pipeline import train
    from pipeline.model import VAE

    device = rows.device
    training = rows[is_train.to(device)]
    n_train = int(training.shape[0])
    plan = train.plan_training(n_train, cfg)
    torch.manual_seed(cfg.seed)
    model = VAE(rows.shape[1], cfg).to(device)
    optimizer = train.Adam(model.parameters(), lr=plan.learning_rate,
                           **(dict(fused=True, capturable=capture) if device.type == "cuda" else {}))
    generator = torch.Generator(device=device).manual_seed(seed)
    step = train.build_step(model, optimizer, training, train.batch_lengths(n_train, plan), generator, capture=capture)
    if step.captured != capture:
        raise RuntimeError(f"asked for a {'captured' if capture else 'plain'} step, got the other kind")
    return step, train.epoch_batches(n_train, plan, generator), plan


def step_times(rows, is_train, cfg, capture: bool, steps: int) -> dict:
    """Per-step milliseconds of ``steps`` steps (whole epochs, the short last batch included)."""
    import torch

    step, batches, plan = make_step(rows, is_train, cfg, capture)
    for batch in batches[:10] + batches[-1:]:  # warm: first calls of each graph / shape
        step(batch)
    sync(rows.device.type)
    order = [batches[k % len(batches)] for k in range(steps)]
    if rows.device.type == "cuda":
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        marks[0].record()
        for k, batch in enumerate(order):
            step(batch)
            marks[k + 1].record()
        torch.cuda.synchronize()
        times = [marks[k].elapsed_time(marks[k + 1]) for k in range(steps)]
    else:
        times = []
        for batch in order:
            started = time.perf_counter()
            step(batch)
            times.append((time.perf_counter() - started) * 1000)
    return {"batch": plan.batch, "steps_per_epoch": plan.steps_per_epoch, "learning_rate": plan.learning_rate,
            "step_ms_median": statistics.median(times), "step_ms_p95": float(np.percentile(times, 95))}


def measure_kind(rows, is_train, cfg, capture: bool, repeats: int, steps: int, abnormal, labelled) -> dict:
    """Step times, then ``repeats`` timed ``fit_vae`` runs: their times, the last one's epochs, loss, AUROC."""
    from pipeline.metrics import auroc
    from pipeline.score import score_beats
    from pipeline.train import fit_vae

    out, times = step_times(rows, is_train, cfg, capture, steps), []
    for _ in range(repeats):
        sync(rows.device.type)
        started = time.perf_counter()
        model, history = fit_vae(rows, is_train, cfg)
        sync(rows.device.type)
        times.append(time.perf_counter() - started)
    scores = score_beats(model, rows)[0].cpu().numpy()
    return {**out, "train_s_median": statistics.median(times), "train_s_all": times, "epochs": len(history),
            "final_loss": history[-1], "auroc": auroc(scores[labelled], abnormal[labelled]), "scores": scores}


def config_overrides(pairs: list[str], base) -> dict:
    """``["mixed_precision=true", "patience=2"]`` → VAEConfig field values, typed like ``base``'s."""
    out = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        if not hasattr(base, name):
            raise SystemExit(f"error: --set {pair}: VAEConfig has no field {name!r}")
        current = getattr(base, name)
        out[name] = text.lower() in ("1", "true", "yes") if isinstance(current, bool) else type(current)(text)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    parser.add_argument("--samples", type=parse_size, default=20_000_000, help="synthetic recording length (20M)")
    parser.add_argument("--run", type=Path, help="take the beats of this run directory instead")
    parser.add_argument("--batches", default="", help="batch sizes to compare, e.g. 2048,4096 (default: VAEConfig's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed fit_vae runs per setting")
    parser.add_argument("--steps", type=int, default=200, help="steps timed one by one per setting")
    parser.add_argument("--no-before", action="store_true", help="skip the previous settings (30 plain epochs)")
    parser.add_argument("--threads", type=int, help="CPU threads (default: the pipeline's policy, pipeline.threads)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a VAEConfig field for every setting, e.g. mixed_precision=true (repeatable)")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="let cuDNN time its convolution algorithms and keep the fastest")
    args = parser.parse_args(argv)

    from pipeline import threads

    threads.limit_threads(args.threads)
    import torch

    from pipeline import PipelineWarning
    from pipeline.config import VAEConfig
    from pipeline.train import fit_vae, split_train

    warnings.simplefilter("error", PipelineWarning)  # a capture that falls back to plain steps is a failure
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda, but PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    started = time.perf_counter()
    rows, symbols = run_beats(args.run) if args.run else synthetic_beats(args.samples)
    made_s, labelled, abnormal = time.perf_counter() - started, symbols != "", np.isin(symbols, ABNORMAL)
    tensor = torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    is_train = split_train(len(tensor), 0.75, 0)
    default = replace(VAEConfig(), **config_overrides(args.set, VAEConfig()))
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    batches = [int(b) for b in args.batches.split(",") if b.strip()] or [default.batch_size]
    kinds = ["plain", "captured"] if device == "cuda" else ["plain"]
    machine = {k: v for k, v in describe_machine(device == "cuda").items() if k != "versions"} | {"torch": torch.__version__}
    if device == "cuda":
        machine.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                       allocator=torch.cuda.get_allocator_backend())
    print(f"machine    {json.dumps(machine)}")
    print(f"settings   {args.set or 'VAEConfig defaults'}, cudnn.benchmark={args.cudnn_benchmark}")
    print(f"beats      {len(tensor):,} ({int(is_train.sum()):,} train), width {tensor.shape[1]}, "
          f"{int(abnormal[labelled].sum()):,} injected abnormal of {int(labelled.sum()):,} labelled; "
          f"{'run ' + str(args.run) if args.run else f'synthetic {args.samples:,} samples'} ({made_s:.1f} s to make)")
    fit_vae(tensor, is_train, replace(default, epochs=1))  # untimed: library set-up (cuDNN, cuBLAS) for all kinds
    sync(device)

    results, failures = [], []
    settings = [(b, k, replace(default, batch_size=b)) for b in batches for k in kinds]
    settings = ([] if args.no_before else [(BEFORE["batch_size"], "before", replace(default, **BEFORE))]) + settings
    print(f"{'batch':>6} {'kind':<9} {'lr':>8} {'steps/ep':>8} {'step ms':>8} {'p95 ms':>7} "
          f"{'train s':>8} {'epochs':>6} {'loss':>8} {'AUROC':>6}")
    for batch, kind, cfg in settings:
        try:
            r = measure_kind(tensor, is_train, cfg, kind == "captured", args.repeats, args.steps, abnormal, labelled)
        except Exception as err:  # report, go on with the other settings, fail at the end
            traceback.print_exc()
            failures.append(f"batch {batch} {kind}: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}")
            continue
        results.append({**r, "kind": kind, "batch_asked": batch})
        print(f"{r['batch']:>6} {kind:<9} {r['learning_rate']:>8.2e} {r['steps_per_epoch']:>8} {r['step_ms_median']:>8.3f} "
              f"{r['step_ms_p95']:>7.3f} {r['train_s_median']:>8.3f} {r['epochs']:>6} {r['final_loss']:>8.4f} "
              f"{r['auroc']:>6.4f}", flush=True)

    print()
    for batch in batches:
        pair = {r["kind"]: r for r in results if r["batch_asked"] == batch and r["kind"] in ("plain", "captured")}
        if len(pair) == 2:
            from scipy.stats import spearmanr

            rho = float(spearmanr(pair["plain"]["scores"], pair["captured"]["scores"]).statistic)
            gap = abs(pair["plain"]["auroc"] - pair["captured"]["auroc"])
            agree = rho > 0.98 and gap <= 0.01
            print(f"batch {batch}: captured vs plain: training "
                  f"{pair['plain']['train_s_median'] / pair['captured']['train_s_median']:.1f}× faster; score Spearman "
                  f"{rho:.4f}, AUROC difference {gap:.4f} -> {'AGREE' if agree else 'DISAGREE'}")
            failures += [] if agree else [f"batch {batch}: captured training disagrees with plain (Spearman {rho:.4f}, "
                                          f"AUROC difference {gap:.4f})"]
    headline = next((r for r in results if r["batch_asked"] == default.batch_size and r["kind"] == kinds[-1]), None)
    if headline is not None and device == "cuda" and not args.run and args.samples == 20_000_000:
        for name, key, limit, higher in TARGETS:
            met = headline[key] >= limit if higher else headline[key] <= limit
            print(f"target: {name}: {headline[key]:.4f} -> {'met' if met else 'MISSED'}")
            failures += [] if met else [f"target missed: {name}: {headline[key]:.4f}"]
    before = next((r for r in results if r["kind"] == "before"), None)
    if before is not None and headline is not None:
        print(f"before -> now: training {before['train_s_median']:.2f} s -> {headline['train_s_median']:.2f} s, "
              f"AUROC {before['auroc']:.4f} -> {headline['auroc']:.4f}, epochs {before['epochs']} -> {headline['epochs']}")
    print(json.dumps({"device": machine, "beats": len(tensor), "failures": failures,
                      "results": [{k: v for k, v in r.items() if k != "scores"} for r in results]}, default=float))
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
