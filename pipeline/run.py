"""The conductor: the only place where steps are chained.

``run_pipeline`` loads a recording (or the synthetic default), finds and embeds the beats,
trains the VAE, scores every beat and writes a run directory, reporting each stage to a
``progress`` callback and timing it with the device synchronised.
"""
from __future__ import annotations

import contextlib
import platform
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
import dataclasses
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

import pipeline
from pipeline import backend, collector, results, threads
from pipeline.config import config_hash
from pipeline.reference_store import report_entry
from pipeline.requests import RunRequest
from pipeline.segmentation import Segmented, segment
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
            from pipeline.warmup import warm_up

            warm_up(device, request, input_path)
    job = _Job(input_path, digest, key, request, device)
    with backend.PeakMemory(device) as memory, backend.recording_handoffs() as ledger:
        computed = _compute(job, stages)
        with stages("results"):
            run = _write(job, computed, stages, handoffs=ledger.as_dicts(), memory=memory.read())
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
@dataclass(frozen=True)
class _Job:
    """The run asked for: its input, the input's digests, the cache key, the request, the device."""

    input_path: Path
    digest: dict
    key: str
    request: RunRequest
    device: str


@dataclass
class Computed:
    """Everything a computed run writes (:func:`_write`), on the device it was computed on unless
    said otherwise."""

    recording: Any        # load.Recording
    segmented: Segmented
    embeddings: np.ndarray  # the beats' rows, on the host
    model: Any            # the trained VAE
    history: list
    is_train: np.ndarray
    z: Any
    calibrated: Any       # reference.ReferenceScores: the calibrated score and its parts
    reference: Any        # the reference that scored the run
    score_recording: Any
    shape_scores: Any
    rhythm: Any           # rhythm.BeatRhythm
    p_shape: Any
    p_rhythm: Any
    families: "Families"
    grid_z: Any           # torch: the latent grid's points
    decoded: Any          # torch: the beats decoded at them
    torch_version: str


def _compute(job: _Job, stages: "_StageClock") -> Computed:
    from pipeline import embed, lead_agreement, load

    request, cfg = job.request, job.request.signal
    with stages("load"):
        recording = load.load_ecg(job.input_path, fs=request.fs, column=request.column, device=job.device,
                                  default_fs=cfg.default_fs, max_gap_s=cfg.max_gap_s,
                                  min_duration_s=max(2.5, 2 * cfg.window_s))
        other = (load.load_other_lead(recording, device=job.device, max_gap_s=cfg.max_gap_s)
                 if cfg.other_lead else load.OtherLead())
        recording, other = lead_agreement.review_choice(recording, other, cfg)
        recording = dataclasses.replace(recording, other_lead=other.name or "")
    fs, signal = recording.fs, recording.signal
    seg = segment(signal, fs, cfg, stages, other.signal, recording.lost_s)
    del other
    beats, positions = seg.beats, seg.positions
    n_beats = int(beats.rows.shape[0])
    name = job.input_path.name
    if n_beats < 4:
        raise ValueError(f"{name}: found {n_beats} heartbeat(s); too few to analyse "
                         "(is this an ECG? is --fs right?)")
    coherence = embed.beat_coherence(beats.rows, cfg.pre_fiducial, cfg.window_s)
    if coherence < MIN_BEAT_COHERENCE:
        raise ValueError(f"{name}: the {n_beats:,} beats found share no QRS shape (median correlation "
                         f"with the median beat {coherence:.2f}; an ECG's is above 0.9): no QRS-like structure "
                         "(is this an ECG? is --fs right?)")

    with stages("train") as report:
        # PyTorch's import, one of a cold start's largest costs, counts as training, where the
        # progress view shows it; it comes after loading, so that bad input is reported without it.
        import torch

        from pipeline import reference, rhythm, score, train

        embeddings = backend.to_host(beats.rows)
        families = _families_beside_training(embeddings, request.vae.seed, job.device)
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
        calibrated = reference.score_reference(beats.rows, positions, fs, seg.pre, population)
    with stages("families"):
        beat_families = families()
    return Computed(recording, seg, embeddings, model, history, is_train.numpy(), z, calibrated, population,
                    score_recording, shape_scores, beat_rhythm, p_shape, p_rhythm, beat_families, grid_z, decoded,
                    torch.__version__)


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


def _write(job: _Job, c: Computed, stages: "_StageClock", *, handoffs: list, memory: dict) -> results.RunResult:
    """Host copies happen here and only here: table, arrays, model, report."""
    from pipeline.quality import low_quality

    request, recording, seg = job.request, c.recording, c.segmented
    beats, host = seg.beats, backend.to_host
    fiducial = host(beats.fiducial)
    beat_rhythm = c.rhythm
    components = {**c.calibrated.columns(), "score_recording": c.score_recording,
                  "score_shape": c.shape_scores, "score_rhythm": beat_rhythm.score, "p_shape": c.p_shape,
                  "p_rhythm": c.p_rhythm, "rr_pre": beat_rhythm.rr_pre, "rr_post": beat_rhythm.rr_post,
                  "prematurity": beat_rhythm.prematurity, "local_rr_s": beat_rhythm.local_rr_s}
    table = results.beats_table(fiducial=fiducial, length=host(beats.length), start=fiducial - seg.pre,
                                fs=recording.fs, is_train=c.is_train, z=host(c.z), score=host(c.calibrated.score),
                                annotations=recording.annotations,
                                components={name: host(values) for name, values in components.items()})
    table["family"] = c.families.family
    table["quality"] = host(seg.quality).astype(np.float32)
    episodes = results.episodes_table(seg.episodes, host(seg.pauses), recording.fs)
    report = {
        "version": pipeline.__version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "key": job.key,
        "input": {"path": str(job.input_path), "sha256": job.digest["sha256"],
                  "annotations_sha256": job.digest.get("annotations"), "channel": recording.channel,
                  "lead_reason": recording.lead_reason, "leads": list(recording.leads),
                  "other_lead": recording.other_lead,
                  "fs": recording.fs, "n_samples": recording.n_samples,
                  "duration_s": recording.n_samples / recording.fs,
                  "repaired_samples": recording.repaired_samples,
                  "signal_lost_s": round(float((recording.lost_s[:, 1] - recording.lost_s[:, 0]).sum()), 3),
                  "annotated": recording.annotations is not None},
        "device": _describe_device(job.device, c.torch_version),
        "config": {"signal": asdict(request.signal), "vae": asdict(request.vae),
                   "fs_override": request.fs, "column": request.column},
        "counts": {"fiducials": int(seg.positions.shape[0]), "beats": len(table),
                   "from_other_lead": seg.from_other_lead,
                   **{f"{kind}_episodes": int((episodes["kind"] == kind).sum())
                      for kind in ("flutter", "noise", "lost", "pause")},
                   "low_quality": int(low_quality(table["quality"].to_numpy()).sum()),
                   "train": int(c.is_train.sum()), "test": int((~c.is_train).sum())},
        "length_histogram": {"counts": host(seg.histogram[0]).tolist(),
                             "edges_s": host(seg.histogram[1]).round(4).tolist()},
        "training": {"epochs": request.vae.epochs, "loss_history": [round(v, 4) for v in c.history]},
        "beat_scale": beats.scale,
        "reference": report_entry(c.reference),
    }
    checkpoint = {"config": asdict(c.model.cfg), "width": seg.width, "model": c.model.state_dict()}
    report["stages_s"] = dict(stages.times)
    report["stages_s"]["results"] = round(stages.elapsed("results"), 6)  # host copies; file writes follow
    report["memory"] = memory
    report["handoffs"] = handoffs
    report["segmentation_s"] = round(sum(stages.times.get(s, 0.0) for s in SEGMENTATION), 6)
    path = results.write_run(Path(request.out), job.key, report=report, beats=table, fiducials=host(seg.positions),
                             signal=host(recording.signal), embeddings=c.embeddings,
                             decoded_z=c.grid_z.cpu().numpy(), decoded=c.decoded.cpu().numpy(),
                             checkpoint=checkpoint, families=c.families, episodes=episodes)
    run = results.load_run(path)
    run.cached = False
    return run


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
        import cupy

        cudf = backend.import_cudf()
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
