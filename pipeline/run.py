"""The conductor: the only place where steps are chained.

``run_pipeline`` loads a recording (or the synthetic default), finds and embeds the beats,
trains the VAE, scores every beat and writes a run directory, reporting each stage to a
``progress`` callback and timing it with the device synchronised.
"""
from __future__ import annotations

import contextlib
import math
import platform
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

import pipeline
from pipeline import backend, collector, results, threads
from pipeline.config import SignalConfig, VAEConfig, config_hash
from pipeline.reference_store import report_entry
from pipeline.requests import RunRequest
from pipeline.stages import SEGMENTATION, STAGES

if TYPE_CHECKING:
    from pipeline.families import Families

# Synthetic default recording: 20M samples (~22 h at 250 Hz) on the GPU; 2M (~2.2 h) on the CPU,
# where the same run would take many minutes.
DEFAULT_SAMPLES = {"gpu": 20_000_000, "cpu": 2_000_000}

# Below this median correlation of the beats' QRS windows with the median beat's, what was found
# is no heartbeat (1-bit, white or band-passed noise: 0.0-0.2; noise three times an ECG: 0.45).
MIN_BEAT_COHERENCE = 0.3

Progress = Callable[[str, float, str], None]  # (stage, fraction of that stage done, message)


def run_pipeline(request: RunRequest = RunRequest(), progress: Progress | None = None) -> results.RunResult:
    """Run (or fetch from the cache) the whole pipeline for ``request``.

    A cached run costs a stat of the input, a fast hash of the run's files (so that no damaged file
    is served) and reading the run: no GPU library, no PyTorch, and no hashing of an unchanged
    input (see :mod:`pipeline.results`). Python's
    cyclic garbage collector is paused meanwhile (:mod:`pipeline.collector`: while PyTorch and
    scikit-learn import, its collections walk objects that live as long as the process).
    """
    with collector.paused():
        found = _run(request, progress)
        return results.load_run(found) if isinstance(found, Path) else found


def run_to_directory(request: RunRequest = RunRequest(), progress: Progress | None = None) -> tuple[Path, bool]:
    """:func:`run_pipeline` for a caller that reads the run itself, elsewhere: the run
    directory, and whether it came from the cache (which is then not read here)."""
    with collector.paused():
        found = _run(request, progress)
    return (found, True) if isinstance(found, Path) else (found.path, False)


def _run(request: RunRequest, progress: Progress | None) -> results.RunResult | Path:
    """The computed run, or the directory of the cached one."""
    device = backend.resolve_device(request.device)
    stages = _StageClock(device, progress)
    out = Path(request.out)
    results.clean_leftovers(out)  # temporary folders and files that killed runs left behind
    input_path = Path(request.input) if request.input else _synthetic_default(request, device, stages)

    with stages("hash", host=True):
        digest, signature = _hash_input(input_path, out)
    key = run_key(digest, device, request)
    if request.use_cache and (cached := results.find_cached(out, key)):
        results.remember_input_digest(input_path, out, signature, digest)
        stages.notify("results", 1.0, f"cached run {cached}")
        return cached

    with stages("setup"):       # imports Numba (and RMM on a GPU): a large part of a cold start
        threads.limit_threads()
        if device == "gpu":
            backend.use_rmm_pool()
    if request.warm_up:
        with stages("warmup"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Numba's low-occupancy notes about the small warm-up grids
            _warm_up(device, request, input_path)
    with backend.PeakMemory(device) as memory, backend.recording_handoffs() as ledger:
        computed = _compute(input_path, request, device, stages)
        with stages("results"):
            run = _write(input_path, digest, key, request, device, computed, stages,
                         ledger.as_dicts(), memory.read())
    results.remember_input_digest(input_path, out, signature, digest)
    return run


def run_key(digest: dict, device: str, request: RunRequest) -> str:
    """The cache key of a run: the input's digests (:func:`pipeline.digests.input_digest`), the
    device, every parameter and the reference beat model's digest. A sidecar of reference labels
    enters only when there is one."""
    from pipeline.reference_store import reference_digest

    return cache_key(digest, device, request.fs, request.column, request.signal, request.vae,
                reference_digest(request.reference))


def cache_key(digest: dict, device: str, fs, column, signal, vae, reference: str) -> str:
    """The key of a run from its parts (:func:`run_key` from a request)."""
    parts = [digest["sha256"], device, fs, column, signal, vae, {"reference": reference}]
    if digest.get("annotations"):
        parts.append({"annotations": digest["annotations"]})
    return config_hash(*parts)


# --------------------------------------------------------------------------- steps
def _compute(input_path: Path, request: RunRequest, device: str, stages: "_StageClock") -> dict:
    from pipeline import embed, load, peaks, wavelet

    cfg = request.signal
    with stages("load"):
        recording = load.load_ecg(input_path, fs=request.fs, column=request.column, device=device,
                                  default_fs=cfg.default_fs, max_gap_s=cfg.max_gap_s,
                                  min_duration_s=max(2.5, 2 * cfg.window_s))
    fs, signal = recording.fs, recording.signal
    with stages("wavelet"):
        response = wavelet.ricker_response(signal, fs, cfg.ricker_width_s)
    with stages("peaks"):
        positions, found, pauses = heartbeats(response, signal, fs, cfg)
    del response
    with stages("lengths"):
        lengths = peaks.beat_lengths(positions)
        histogram = peaks.length_histogram(lengths, fs)
    with stages("embed"):
        width = cfg.window(fs)
        beats = embed.embed_beats(signal, positions, fs, width=width, pre_fiducial=cfg.pre_fiducial)
        beat_quality = quality_of_beats(signal, positions, found, fs)
    n_beats = int(beats.rows.shape[0])
    if n_beats < 4:
        raise ValueError(f"{input_path.name}: found {n_beats} heartbeat(s); too few to analyse "
                         "(is this an ECG? is --fs right?)")
    coherence = embed.beat_coherence(beats.rows, cfg.pre_fiducial, cfg.window_s)
    if coherence < MIN_BEAT_COHERENCE:
        raise ValueError(f"{input_path.name}: the {n_beats:,} beats found share no QRS shape (median correlation "
                         f"with the median beat {coherence:.2f}; an ECG's is above 0.9): no QRS-like structure "
                         "(is this an ECG? is --fs right?)")

    with stages("train") as report:
        # PyTorch's import, one of a cold start's largest costs, counts as training, where the
        # progress view shows it; it comes after loading, so that bad input is reported without it.
        import torch

        from pipeline import reference, rhythm, score, train

        embeddings = backend.to_host(beats.rows)
        families = _families_beside_training(embeddings, request.vae.seed, device)
        rows = backend.to_torch(beats.rows)
        is_train = train.split_train(n_beats, request.vae.train_fraction, request.vae.seed)
        model, history = train.fit_vae(rows, is_train, request.vae, progress=report)
    with stages("score"):
        scores, z = score.score_beats(model, rows)
        grid_z = score.latent_grid(z, request.vae.grid)
        decoded = score.decode(model, grid_z)
        xp = backend.xp_of(beats.rows)
        shape_scores, z = backend.from_torch(scores, xp), backend.from_torch(z, xp)
        beat_rhythm = rhythm.describe_rhythm(positions, fs)
        score_recording, p_shape, p_rhythm = score.combine_scores(shape_scores, beat_rhythm.score)
        population = reference.load_reference(request.reference)
        calibrated = reference.score_reference(beats.rows, positions, fs, int(round(cfg.pre_fiducial * width)),
                                               population)
    with stages("families"):
        beat_families = families()
    return dict(recording=recording, positions=positions, beats=beats, episodes=found, pauses=pauses,
                quality=beat_quality, embeddings=embeddings, histogram=histogram,
                model=model, history=history, is_train=is_train.numpy(), scores=calibrated.score, z=z,
                calibrated=calibrated, reference=population, score_recording=score_recording,
                shape_scores=shape_scores, rhythm=beat_rhythm, p_shape=p_shape, p_rhythm=p_rhythm,
                families=beat_families, grid_z=grid_z, decoded=decoded, width=width,
                torch_version=torch.__version__)


def heartbeats(response, signal, fs: float, cfg: SignalConfig):
    """The heartbeats of ``signal`` from its Ricker ``response``: (fiducials, episodes, pauses).
    Flutter waves are no heartbeats, so the fiducials inside flutter episodes are taken out; beats
    in noise are kept (their quality says so): a real beat hidden because noise surrounds it would
    be a missed beat. Pauses are the intervals of at least ``cfg.pause_s`` between the beats kept."""
    from pipeline import episodes, peaks, rhythm

    positions = peaks.find_beats(response, signal, fs, cfg)
    found = episodes.find_episodes(signal, fs, positions)
    positions = positions[~episodes.in_episodes(positions, found, fs, "flutter")]
    return positions, found, rhythm.pauses(positions, fs, cfg.pause_s)


def quality_of_beats(signal, positions, found, fs: float):
    """Each beat's quality (:func:`pipeline.quality.beat_quality`), below the low-quality line for
    every beat inside a noise episode, whatever its own measures say."""
    from pipeline import episodes, quality

    beat_quality = quality.beat_quality(signal, positions, fs)
    in_noise = episodes.in_episodes(positions, found, fs, "noise")
    beat_quality[in_noise] = backend.xp_of(beat_quality).minimum(beat_quality[in_noise], quality.LOW_QUALITY / 2)
    return beat_quality


def _families_beside_training(embeddings: np.ndarray, seed: int, device: str) -> Callable[[], Families]:
    """A function that returns the beat families. On the GPU a thread starts finding them now, beside
    training, which leaves the interpreter and the host's cores mostly idle (replayed CUDA graphs,
    waits on the device): found after scoring, scikit-learn's import and the clustering would add
    to a cold start. The function waits for that thread and raises its error. On the
    CPU, where training uses every core, they are found when the function is called."""
    from pipeline.families import find_families

    if device != "gpu":
        return lambda: find_families(embeddings, seed=seed)
    pool = ThreadPoolExecutor(1, thread_name_prefix="families")
    future = pool.submit(find_families, embeddings, seed=seed)
    pool.shutdown(wait=False)
    return future.result


def _write(input_path, digest, key, request, device, c, stages, handoffs, memory) -> results.RunResult:
    """Host copies happen here and only here: table, arrays, model, report."""
    from pipeline.quality import low_quality

    recording, beats = c["recording"], c["beats"]
    host = backend.to_host
    pre = int(round(request.signal.pre_fiducial * c["width"]))
    fiducial = host(beats.fiducial)
    beat_rhythm = c["rhythm"]
    components = {**c["calibrated"].columns(), "score_recording": c["score_recording"],
                  "score_shape": c["shape_scores"], "score_rhythm": beat_rhythm.score, "p_shape": c["p_shape"],
                  "p_rhythm": c["p_rhythm"], "rr_pre": beat_rhythm.rr_pre, "rr_post": beat_rhythm.rr_post,
                  "prematurity": beat_rhythm.prematurity, "local_rr_s": beat_rhythm.local_rr_s}
    table = results.beats_table(fiducial=fiducial, length=host(beats.length), start=fiducial - pre,
                                fs=recording.fs, is_train=c["is_train"], z=host(c["z"]), score=host(c["scores"]),
                                annotations=recording.annotations,
                                components={name: host(values) for name, values in components.items()})
    table["family"] = c["families"].family
    table["quality"] = host(c["quality"]).astype(np.float32)
    episodes = results.episodes_table(c["episodes"], host(c["pauses"]), recording.fs)
    n_candidates = int(c["positions"].shape[0])
    report = {
        "version": pipeline.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "key": key,
        "input": {"path": str(input_path), "sha256": digest["sha256"],
                  "annotations_sha256": digest.get("annotations"), "channel": recording.channel,
                  "lead_reason": recording.lead_reason, "leads": list(recording.leads),
                  "fs": recording.fs, "n_samples": recording.n_samples,
                  "duration_s": recording.n_samples / recording.fs,
                  "repaired_samples": recording.repaired_samples,
                  "annotated": recording.annotations is not None},
        "device": _describe_device(device, c["torch_version"]),
        "config": {"signal": asdict(request.signal), "vae": asdict(request.vae),
                   "fs_override": request.fs, "column": request.column},
        "counts": {"fiducials": n_candidates, "beats": len(table),
                   **{f"{kind}_episodes": int((episodes["kind"] == kind).sum()) for kind in ("flutter", "noise", "pause")},
                   "low_quality": int(low_quality(table["quality"].to_numpy()).sum()),
                   "train": int(c["is_train"].sum()), "test": int((~c["is_train"]).sum())},
        "length_histogram": {"counts": host(c["histogram"][0]).tolist(),
                             "edges_s": host(c["histogram"][1]).round(4).tolist()},
        "training": {"epochs": request.vae.epochs, "loss_history": [round(v, 4) for v in c["history"]]},
        "beat_scale": beats.scale,
        "reference": report_entry(c["reference"]),
    }
    checkpoint = {"config": asdict(c["model"].cfg), "width": c["width"], "model": c["model"].state_dict()}
    embeddings, signal = c["embeddings"], host(recording.signal)
    report["stages_s"] = dict(stages.times)
    report["stages_s"]["results"] = round(stages.elapsed("results"), 6)  # host copies; file writes follow
    report["memory"] = memory
    report["handoffs"] = handoffs
    report["segmentation_s"] = round(sum(stages.times.get(s, 0.0) for s in SEGMENTATION), 6)
    path = results.write_run(Path(request.out), key, report=report, beats=table, fiducials=host(c["positions"]),
                             signal=signal, embeddings=embeddings, decoded_z=c["grid_z"].cpu().numpy(),
                             decoded=c["decoded"].cpu().numpy(), checkpoint=checkpoint, families=c["families"],
                             episodes=episodes)
    run = results.load_run(path)
    run.cached = False
    return run


def _warm_up(device: str, request: RunRequest, input_path: Path) -> None:
    """Run every reader and kernel of the run once on a small synthetic recording, so that stage
    times measure the work, not one-off set-up (a server start pays this once; the report shows it
    as 'warmup'): the input format's reader on a 20-s file of that format, the segmentation
    kernels and, on the GPU, CuPy's and Numba's kernels at a realistic size (library routines such
    as sorts pick other kernels for large arrays), cuFFT, and PyTorch's cuDNN/cuBLAS set-up and
    the CUDA graph capture of a training step. Numba's CPU kernels come from its on-disk cache
    after the first run; nothing here touches the real input."""
    import tempfile

    from pipeline import load

    with tempfile.TemporaryDirectory(prefix="ecg-warmup-") as folder:
        tiny = _warm_up_file(Path(folder), input_path)
        recording = load.load_ecg(tiny, device=device, default_fs=250.0)
        _warm_up_steps(recording.signal, recording.fs, request)
    if device == "gpu":
        xp = backend.xp_for(device)
        fs = 250.0
        rows = _warm_up_steps(_warm_up_signal(xp, fs), fs, request)
        _warm_up_training(rows, request.vae)


def _warm_up_signal(xp, fs: float):
    """2.3 h of pulses (~10,000 beats) with what takes the segmentation's every path, so that none
    compiles its kernels inside the run: small pulses between the large ones (the second look),
    10 s of a 4.5 Hz sine (flutter) and 2 s of noise."""
    t = xp.arange(1 << 21, dtype=xp.float64) / fs
    signal = xp.exp(-((t % 0.8) - 0.4) ** 2 / 2e-4) + 0.2 * xp.exp(-((t % 0.8) - 0.8) ** 2 / 2e-4)
    flutter = (t > 600) & (t < 610)
    signal[flutter] = xp.sin(2 * xp.pi * 4.5 * t[flutter])
    noisy = (t > 1200) & (t < 1202)
    signal[noisy] += xp.random.RandomState(0).standard_normal(int(noisy.sum()))
    return signal.astype(xp.float32)


def _warm_up_file(folder: Path, input_path: Path) -> Path:
    """A 20-s pulse train written in the input's format where that format has a reader of its
    own on the GPU (CSV, gzipped CSV, Parquet), else as CSV."""
    fs = 250.0
    t = np.arange(int(20 * fs)) / fs
    values = np.exp(-((t % 0.8) - 0.4) ** 2 / 2e-4).astype(np.float32)
    name = input_path.name.lower()
    if name.endswith((".parquet", ".pq")):
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = folder / "warmup.parquet"
        pq.write_table(pa.table({"ecg": values}), path)
        return path
    path = folder / ("warmup.csv.gz" if name.endswith(".gz") else "warmup.csv")
    text = "\n".join(f"{v:.4f}" for v in values) + "\n"
    if path.suffix == ".gz":
        import gzip

        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _warm_up_steps(signal, fs: float, request: RunRequest):
    """The segmentation chain of :func:`_compute` on ``signal`` and the reference's scoring (which
    also reads the reference); returns the embedded rows."""
    from pipeline import embed, peaks, reference, wavelet

    cfg = request.signal
    positions, found, _ = heartbeats(wavelet.ricker_response(signal, fs, cfg.ricker_width_s), signal, fs, cfg)
    quality_of_beats(signal, positions, found, fs)
    peaks.length_histogram(peaks.beat_lengths(positions), fs)
    width = cfg.window(fs)
    rows = embed.embed_beats(signal, positions, fs, width=width, pre_fiducial=cfg.pre_fiducial).rows
    reference.score_reference(rows, positions, fs, int(round(cfg.pre_fiducial * width)),
                              reference.load_reference(request.reference))
    return rows


def _warm_up_training(rows, cfg: VAEConfig) -> None:
    """One short epoch and a scoring pass on the GPU: CUDA context for PyTorch, cuDNN, cuBLAS,
    fused Adam and the CUDA graph capture (shapes differ from the run's, the libraries do not)."""
    from dataclasses import replace

    from pipeline import score, train

    tensor = backend.to_torch(rows)
    # Enough rows for full-size batches, so that cuDNN times its algorithms for the run's own
    # batch shape here rather than in the run's training.
    enough = math.ceil(cfg.batch_size * cfg.min_steps_per_epoch / cfg.train_fraction)
    tensor = tensor.repeat(math.ceil(enough / tensor.shape[0]), 1)
    model, _ = train.fit_vae(tensor, train.split_train(int(tensor.shape[0]), cfg.train_fraction, cfg.seed),
                             replace(cfg, epochs=1))
    score.score_beats(model, tensor)


def _synthetic_default(request: RunRequest, device: str, stages: "_StageClock") -> Path:
    """The synthetic recording for this device, written once as CSV and then reused."""
    from pipeline import synth

    n = request.samples or DEFAULT_SAMPLES[device]
    path = Path(request.out) / "inputs" / f"synthetic-{n}-seed{request.seed}.csv"
    if not path.exists():
        with stages("synth", host=True):
            path.parent.mkdir(parents=True, exist_ok=True)
            synth.write_csv(synth.synthesize(synth.SynthConfig(n_samples=n, seed=request.seed)), path)
    return path


def _hash_input(path: Path, out: Path) -> tuple[dict, list]:
    """The input's digests (remembered in the runs folder while the input's files are unchanged)
    and its stat signature. A folder, FIFO or device is refused with a ValueError naming it
    (:func:`pipeline.digests.recording_files`), before anything waits on it."""
    if not path.exists() and not path.with_suffix(".hea").exists():
        raise ValueError(f"no such file: {path}")
    return results.remembered_input_digest(path, out)


def _describe_device(device: str, torch_version: str) -> dict:
    import numba

    import torch

    info = {"name": device, "python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "torch": torch_version, "cpu": platform.processor() or platform.machine(),
            "cpu_threads": {"torch": torch.get_num_threads(), "numba": numba.get_num_threads(),
                            "available": threads.available_cpus()}}
    if device == "gpu":
        import cudf
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        info.update(gpu=props["name"].decode(), cupy=cupy.__version__, cudf=cudf.__version__)
    return info


# --------------------------------------------------------------------------- stage clock
class _StageClock:
    """Times stages (device synchronised at both ends, but for host stages) and forwards progress."""

    def __init__(self, device: str, progress: Progress | None):
        self.device, self.progress = device, progress
        self.times: dict[str, float] = {}
        self._started: dict[str, float] = {}

    def notify(self, stage: str, fraction: float, message: str = "") -> None:
        if self.progress:
            self.progress(stage, fraction, message or STAGES[stage])

    def elapsed(self, stage: str) -> float:
        return time.perf_counter() - self._started[stage]

    @contextlib.contextmanager
    def __call__(self, stage: str, host: bool = False):
        """``host``: the stage runs on the host only, so there is nothing to synchronise (on a GPU
        the first synchronisation creates CUDA's context, which a cached run does not need)."""
        device = "cpu" if host else self.device
        backend.synchronize(device)
        self.notify(stage, 0.0)
        self._started[stage] = time.perf_counter()
        yield lambda fraction, message="": self.notify(stage, fraction, message)
        backend.synchronize(device)
        self.times[stage] = round(self.elapsed(stage), 6)
        self.notify(stage, 1.0)
