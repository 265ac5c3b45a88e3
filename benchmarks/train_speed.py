"""VAE training speed and quality: plain steps against CUDA-graph-captured steps, on realistic beats.

    PYTHONPATH=. python -m benchmarks.train_speed                       # GPU: 20M-sample synthetic default
    PYTHONPATH=. python -m benchmarks.train_speed --batches 2048,4096,8192 --repeats 3
    PYTHONPATH=. python -m benchmarks.train_speed --device cpu --samples 2M   # the CPU path (plain only)
    PYTHONPATH=. python -m benchmarks.train_speed --run runs/<key>      # beats of a finished run

The beats come from the seeded synthetic recording (the pipeline's default on the GPU: 20M samples,
~93,000 beats, ~70,000 of them trained on) cut by the pipeline's own CPU segmentation, or from a
run directory; the injected abnormal beats (V, A, Q) give the outlier AUROC. For each batch size
and each kind of step (``plain``; ``captured``, GPU only; ``before``: the settings before this
change — batch 2048, learning rate 4e-3, all 30 epochs, plain), it prints:

- per step: median and p95 ms of a training step, from CUDA events around each of 200 steps
  (device time as the training loop experiences it, launch gaps included; wall clock on the CPU);
- per training: ``fit_vae`` wall time (device synchronised; median over ``--repeats`` runs after an
  untimed warm-up fit), epochs run, final epoch loss, outlier AUROC of all beats;
- plain against captured: Spearman correlation of the two models' scores and the AUROC difference.

It fails loudly: any error, a capture that falls back to plain steps (a warning turned into an
error), or captured training that disagrees with plain training ends with exit status 1 and the
reason; missed targets (captured training ≤ 1 s, AUROC ≥ 0.99 at the default batch) are printed
as MISSED and also give exit status 1. The last line is a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

TRAIN_TARGET_S = 1.0
AUROC_TARGET = 0.99
ABNORMAL = ("V", "A", "Q")
BEFORE = dict(batch_size=2048, learning_rate=4e-3, tolerance=0.0, cuda_graph=False)  # the schedule this replaced


def parse_size(text: str) -> int:
    text = text.strip().replace("_", "")
    scale = {"k": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def synthetic_beats(samples: int, seed: int = 0):
    """Rows (n, width) float32 and the symbol of each beat ('' when no injected beat is within
    150 ms), from the seeded synthetic recording cut by the pipeline's CPU segmentation."""
    from pipeline import embed, peaks, synth, wavelet
    from pipeline.config import SignalConfig

    cfg = SignalConfig()
    ecg = synth.synthesize(synth.SynthConfig(n_samples=samples, seed=seed))
    response = wavelet.ricker_response(ecg.signal, ecg.fs, cfg.ricker_width_s)
    positions = peaks.find_beats(response, ecg.signal, ecg.fs, cfg)
    beats = embed.embed_beats(ecg.signal, positions, ecg.fs, width=cfg.window(ecg.fs), pre_fiducial=cfg.pre_fiducial)
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


def describe(device: str) -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor() or
            platform.machine(), "cpu_threads": torch.get_num_threads()}
    if device == "cuda":
        info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version(), allocator=torch.cuda.get_allocator_backend())
    return info


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def step_times(rows, is_train, cfg, capture: bool, steps: int) -> dict:
    """Per-step time of ``steps`` steps of the training step :func:`pipeline.train.fit_vae` builds."""
    import torch

    from pipeline import train
    from pipeline.model import VAE

    device = rows.device
    training = rows[is_train.to(device)]
    plan = train.plan_training(int(training.shape[0]), cfg)
    torch.manual_seed(cfg.seed)
    model = VAE(rows.shape[1], cfg).to(device)
    adam = dict(fused=True, capturable=capture) if device.type == "cuda" else {}
    optimizer = train.Adam(model.parameters(), lr=plan.learning_rate, **adam)
    n_train = int(training.shape[0])
    generator = torch.Generator(device=device).manual_seed(1)
    step = train.build_step(model, optimizer, training, train.batch_lengths(n_train, plan), generator, capture=capture)
    if step.captured != capture:
        raise RuntimeError(f"asked for a {'captured' if capture else 'plain'} step, got the other kind")
    batches = train.epoch_batches(n_train, plan, generator)
    for batch in batches[:10] + batches[-1:]:  # warm: first calls of each graph / shape
        step(batch)
    sync(device.type)
    order = [batches[k % len(batches)] for k in range(steps)]  # whole epochs, the short last batch included
    times = []
    if device.type == "cuda":
        marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        marks[0].record()
        for k, batch in enumerate(order):
            step(batch)
            marks[k + 1].record()
        torch.cuda.synchronize()
        times = [marks[k].elapsed_time(marks[k + 1]) for k in range(steps)]
    else:
        for batch in order:
            started = time.perf_counter()
            step(batch)
            times.append((time.perf_counter() - started) * 1000)
    return {"batch": plan.batch, "steps_per_epoch": plan.steps_per_epoch, "learning_rate": plan.learning_rate,
            "step_ms_median": statistics.median(times), "step_ms_p95": float(np.percentile(times, 95))}


def fit_and_score(rows, is_train, cfg, abnormal, labelled) -> dict:
    """One timed ``fit_vae`` (device synchronised), its epochs, final loss, scores and AUROC."""
    from pipeline.metrics import auroc
    from pipeline.score import score_beats
    from pipeline.train import fit_vae

    sync(rows.device.type)
    started = time.perf_counter()
    model, history = fit_vae(rows, is_train, cfg)
    sync(rows.device.type)
    seconds = time.perf_counter() - started
    scores = score_beats(model, rows)[0].cpu().numpy()
    return {"train_s": seconds, "epochs": len(history), "final_loss": history[-1], "scores": scores,
            "auroc": auroc(scores[labelled], abnormal[labelled])}


def measure_kind(rows, is_train, cfg, kind: str, repeats: int, steps: int, abnormal, labelled) -> dict:
    capture = kind == "captured"
    per_step = step_times(rows, is_train, cfg, capture, steps)
    runs = [fit_and_score(rows, is_train, cfg, abnormal, labelled) for _ in range(repeats)]
    times = [r["train_s"] for r in runs]
    last = runs[-1]
    return {**per_step, "kind": kind, "train_s_median": statistics.median(times), "train_s_all": times,
            "epochs": last["epochs"], "final_loss": last["final_loss"], "auroc": last["auroc"], "scores": last["scores"]}


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
    parser.add_argument("--batches", default="", help="batch sizes to compare, e.g. 2048,4096,8192 "
                        "(default: VAEConfig's)")
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
    made_s = time.perf_counter() - started
    labelled = symbols != ""
    abnormal = np.isin(symbols, ABNORMAL)
    tensor = torch.from_numpy(np.ascontiguousarray(rows)).to(device)
    is_train = split_train(len(tensor), 0.75, 0)
    default = replace(VAEConfig(), **config_overrides(args.set, VAEConfig()))
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    batches = [int(b) for b in args.batches.split(",") if b.strip()] or [default.batch_size]
    kinds = ["plain", "captured"] if device == "cuda" else ["plain"]
    print(f"machine    {json.dumps(describe(device))}")
    print(f"settings   {args.set or 'VAEConfig defaults'}, cudnn.benchmark={args.cudnn_benchmark}")
    print(f"beats      {len(tensor):,} ({int(is_train.sum()):,} train), width {tensor.shape[1]}, "
          f"{int(abnormal[labelled].sum()):,} injected abnormal of {int(labelled.sum()):,} labelled; "
          f"{'run ' + str(args.run) if args.run else f'synthetic {args.samples:,} samples'} ({made_s:.1f} s to make)")
    fit_vae(tensor, is_train, replace(default, epochs=1))  # untimed: library set-up (cuDNN, cuBLAS) for all kinds
    sync(device)

    rows_out, failures = [], []
    settings = [(b, k, replace(default, batch_size=b)) for b in batches for k in kinds]
    if not args.no_before:
        settings.insert(0, (BEFORE["batch_size"], "before", replace(default, **BEFORE)))
    print(f"{'batch':>6} {'kind':<9} {'lr':>8} {'steps/ep':>8} {'step ms':>8} {'p95 ms':>7} "
          f"{'train s':>8} {'epochs':>6} {'loss':>8} {'AUROC':>6}")
    for batch, kind, cfg in settings:
        try:
            result = measure_kind(tensor, is_train, cfg, "captured" if kind == "captured" else "plain",
                                  args.repeats, args.steps, abnormal, labelled)
        except Exception as err:  # report, go on with the other settings, fail at the end
            traceback.print_exc()
            failures.append(f"batch {batch} {kind}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
            continue
        result.update(kind=kind, batch_asked=batch)
        rows_out.append(result)
        print(f"{result['batch']:>6} {kind:<9} {result['learning_rate']:>8.2e} {result['steps_per_epoch']:>8} "
              f"{result['step_ms_median']:>8.3f} {result['step_ms_p95']:>7.3f} {result['train_s_median']:>8.3f} "
              f"{result['epochs']:>6} {result['final_loss']:>8.4f} {result['auroc']:>6.4f}", flush=True)

    print()
    for batch in batches:
        pair = {r["kind"]: r for r in rows_out if r["batch_asked"] == batch and r["kind"] in ("plain", "captured")}
        if len(pair) == 2:
            from scipy.stats import spearmanr

            rho = float(spearmanr(pair["plain"]["scores"], pair["captured"]["scores"]).statistic)
            gap = abs(pair["plain"]["auroc"] - pair["captured"]["auroc"])
            speedup = pair["plain"]["train_s_median"] / pair["captured"]["train_s_median"]
            agree = rho > 0.98 and gap <= 0.01
            print(f"batch {batch}: captured vs plain: training {speedup:.1f}× faster; score Spearman {rho:.4f}, "
                  f"AUROC difference {gap:.4f} -> {'AGREE' if agree else 'DISAGREE'}")
            if not agree:
                failures.append(f"batch {batch}: captured training disagrees with plain (Spearman {rho:.4f}, "
                                f"AUROC difference {gap:.4f})")
    headline = next((r for r in rows_out if r["batch_asked"] == default.batch_size and r["kind"] == kinds[-1]), None)
    targets = []
    if headline is not None and device == "cuda" and not args.run and args.samples == 20_000_000:
        targets = [("training (captured, 20M default) <= 1 s", headline["train_s_median"], headline["train_s_median"]
                    <= TRAIN_TARGET_S),
                   ("outlier AUROC (synthetic 20M) >= 0.99", headline["auroc"], headline["auroc"] >= AUROC_TARGET)]
        for name, value, met in targets:
            print(f"target: {name}: {value:.4f} -> {'met' if met else 'MISSED'}")
            if not met:
                failures.append(f"target missed: {name}: {value:.4f}")
    before = next((r for r in rows_out if r["kind"] == "before"), None)
    if before is not None and headline is not None:
        print(f"before -> now: training {before['train_s_median']:.2f} s -> {headline['train_s_median']:.2f} s, "
              f"AUROC {before['auroc']:.4f} -> {headline['auroc']:.4f}, epochs {before['epochs']} -> {headline['epochs']}")
    summary = {"device": describe(device), "beats": len(tensor), "results": [
        {k: v for k, v in r.items() if k != "scores"} for r in rows_out], "failures": failures}
    print(json.dumps(summary, default=float))
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
