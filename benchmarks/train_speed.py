"""VAE training speed and quality: plain steps against CUDA-graph-captured steps, on realistic beats.

    python -m benchmarks.train_speed [--device cpu] [--samples 2M] [--batches 2048,4096] [--repeats 3]

The beats are the seeded synthetic recording's, cut by the pipeline's segmentation; the injected
abnormal beats (V, A, Q) give the outlier AUROC. Per batch size and kind of step (``plain``;
``captured``, GPU only): the median and p95 of single steps (CUDA events on the GPU, wall clock on
the CPU), ``fit_vae``'s wall time (median of ``--repeats`` after a warm-up fit), epochs, final loss
and AUROC. Exit status 1 on an error, a capture that falls back to plain steps, or a missed target
(captured ≤ 1 s, AUROC ≥ 0.99 at 20M); the last line is JSON.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import replace

import numpy as np

from benchmarks import report
from benchmarks.measure import clocked, describe_machine, synchronize
from benchmarks.recordings import parse_size
from pipeline import PipelineWarning, synth, threads
from pipeline.config import SignalConfig, VAEConfig
from pipeline.metrics import auroc
from pipeline.segmentation import segment
from pipeline.tables import match_labels

TARGETS = (("training (captured, 20M default) <= 1 s", "train_s_median", 1.0, False),
           ("outlier AUROC (synthetic 20M) >= 0.99", "auroc", 0.99, True))
ABNORMAL = ("V", "A", "Q")


def synthetic_beats(samples: int, seed: int = 0):
    """Rows (n, width) float32 and each beat's symbol ('' when no injected beat is within 150 ms)."""
    ecg = synth.synthesize(synth.SynthConfig(n_samples=samples, seed=seed))
    beats = segment(ecg.signal, ecg.fs, SignalConfig()).beats
    return beats.rows, match_labels(beats.fiducial, ecg.r_peaks, ecg.symbols, int(0.15 * ecg.fs))


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
    synchronize(_device(rows))
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
    from pipeline.score import score_beats
    from pipeline.train import fit_vae

    out = step_times(rows, is_train, cfg, capture, steps)
    times, (model, history) = clocked(lambda: fit_vae(rows, is_train, cfg), _device(rows), repeats)
    scores = score_beats(model, rows)[0].cpu().numpy()
    return {**out, "train_s_median": statistics.median(times), "train_s_all": times, "epochs": len(history),
            "final_loss": history[-1], "auroc": auroc(scores[labelled], abnormal[labelled])}


def _device(rows) -> str:
    """The benchmarks' name of the device a tensor is on."""
    return "gpu" if rows.is_cuda else "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = report.parser("train_speed", __doc__, out=False)
    parser.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    parser.add_argument("--samples", type=parse_size, default=20_000_000, help="synthetic recording length (20M)")
    parser.add_argument("--batches", default="", help="batch sizes to compare, e.g. 2048,4096 (default: VAEConfig's)")
    parser.add_argument("--repeats", type=int, default=3, help="timed fit_vae runs per setting")
    parser.add_argument("--steps", type=int, default=200, help="steps timed one by one per setting")
    args = parser.parse_args(argv)
    threads.limit_threads(None)   # before PyTorch is imported: OpenMP reads the settings when it loads
    import torch

    from pipeline.train import fit_vae, split_train

    warnings.simplefilter("error", PipelineWarning)  # a capture that falls back to plain steps is a failure
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows, symbols = synthetic_beats(args.samples)
    labelled, abnormal = symbols != "", np.isin(symbols, ABNORMAL)
    tensor = torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    is_train, default = split_train(len(tensor), 0.75, 0), VAEConfig()
    batches = [int(b) for b in args.batches.split(",") if b.strip()] or [default.batch_size]
    kinds = ["plain", "captured"] if device == "cuda" else ["plain"]
    machine = {k: v for k, v in describe_machine(device == "cuda").items() if k != "versions"}
    machine["torch"] = torch.__version__
    print(f"machine    {json.dumps(machine)}")
    print(f"beats      {len(tensor):,} ({int(is_train.sum()):,} train), width {tensor.shape[1]}, "
          f"{int(abnormal[labelled].sum()):,} injected abnormal of {int(labelled.sum()):,} labelled")
    fit_vae(tensor, is_train, replace(default, epochs=1))  # untimed: library set-up (cuDNN, cuBLAS) for all kinds
    synchronize(_device(tensor))

    results, failures = [], []
    print(f"{'batch':>6} {'kind':<9} {'step ms':>8} {'p95 ms':>7} {'train s':>8} {'epochs':>6} {'loss':>8} {'AUROC':>6}")
    for batch, kind in [(b, k) for b in batches for k in kinds]:
        try:
            r = measure_kind(tensor, is_train, replace(default, batch_size=batch), kind == "captured", args.repeats,
                             args.steps, abnormal, labelled)
        except Exception as err:  # report, go on with the other settings, fail at the end
            traceback.print_exc()
            failures.append(f"batch {batch} {kind}: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}")
            continue
        results.append({**r, "kind": kind, "batch_asked": batch})
        print(f"{r['batch']:>6} {kind:<9} {r['step_ms_median']:>8.3f} {r['step_ms_p95']:>7.3f} {r['train_s_median']:>8.3f} "
              f"{r['epochs']:>6} {r['final_loss']:>8.4f} {r['auroc']:>6.4f}", flush=True)
    for batch in batches:   # that captured steps train as plain ones do: tests/test_gpu.py
        pair = {r["kind"]: r for r in results if r["batch_asked"] == batch}
        if len(pair) == 2:
            speedup = pair["plain"]["train_s_median"] / pair["captured"]["train_s_median"]
            print(f"batch {batch}: captured {speedup:.1f}× faster than plain")
    headline = next((r for r in results if r["batch_asked"] == default.batch_size and r["kind"] == kinds[-1]), None)
    if headline is not None and device == "cuda" and args.samples == 20_000_000:
        for name, key, limit, higher in TARGETS:
            met = headline[key] >= limit if higher else headline[key] <= limit
            print(f"target: {name}: {headline[key]:.4f} -> {'met' if met else 'MISSED'}")
            failures += [] if met else [f"target missed: {name}: {headline[key]:.4f}"]
    print(json.dumps({"device": machine, "beats": len(tensor), "failures": failures,
                      "results": results}, default=float))
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
