"""GPU tests (CUDA, CuPy, cuDF, Numba CUDA, RMM): CPU/GPU parity of every step, training with the
step captured as a CUDA graph against plain steps, zero-copy hand-offs between the libraries, and
one RMM pool as the allocator of cuDF, CuPy and Numba (PyTorch keeps its own, for CUDA graphs).
Skipped without a GPU."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pipeline import backend
from pipeline.config import SignalConfig, VAEConfig

pytestmark = pytest.mark.gpu  # conftest skips these without a usable CUDA GPU, CuPy and cuDF


def _segment(signal, fs, cfg=SignalConfig()):
    """Ricker response, fiducials and embedded beats of ``signal`` on its own device (as run.py chains them)."""
    from pipeline import embed, peaks, wavelet

    response = wavelet.ricker_response(signal, fs, cfg.ricker_width_s)
    positions = peaks.find_beats(response, signal, fs, cfg)
    beats = embed.embed_beats(signal, positions, fs, width=cfg.window(fs), pre_fiducial=cfg.pre_fiducial)
    return response, positions, beats


def _assert_parity(signal: np.ndarray, fs: float):
    import cupy

    cpu = _segment(signal, fs)
    gpu = _segment(cupy.asarray(signal), fs)
    assert all(backend.is_cupy_array(a) for a in (gpu[0], gpu[1], gpu[2].rows))
    response_cpu, response_gpu = cpu[0], backend.to_host(gpu[0])
    np.testing.assert_allclose(response_gpu, response_cpu, rtol=0, atol=1e-4 * np.abs(response_cpu).max())

    fid_cpu, fid_gpu = cpu[1], backend.to_host(gpu[1])
    common = np.intersect1d(fid_cpu, fid_gpu)
    assert len(common) >= 0.999 * max(len(fid_cpu), len(fid_gpu)), (len(fid_cpu), len(fid_gpu), len(common))

    beats_cpu, beats_gpu = cpu[2], gpu[2]
    at_cpu = np.isin(beats_cpu.fiducial, common)
    at_gpu = np.isin(backend.to_host(beats_gpu.fiducial), common)
    assert at_cpu.mean() >= 0.998 and at_gpu.mean() >= 0.998
    rows_cpu = beats_cpu.rows[at_cpu] * beats_cpu.scale  # compare before the per-recording scaling...
    rows_gpu = backend.to_host(beats_gpu.rows)[at_gpu] * beats_gpu.scale
    np.testing.assert_allclose(rows_gpu, rows_cpu, rtol=0, atol=1e-4 * np.abs(rows_cpu).max())
    assert beats_gpu.scale == pytest.approx(beats_cpu.scale, rel=1e-3)  # ...which may differ by a beat or two
    if np.array_equal(fid_cpu, fid_gpu):
        np.testing.assert_allclose(backend.to_host(beats_gpu.rows), beats_cpu.rows, rtol=0,
                                   atol=1e-4 * np.abs(beats_cpu.rows).max())


def test_parity_on_synthetic_ecg(synthetic_ecg):
    _assert_parity(np.ascontiguousarray(synthetic_ecg.signal), synthetic_ecg.fs)


def test_parity_on_mitdb(mitdb):
    from pipeline.load import load_ecg

    recording = load_ecg(mitdb / "208.hea")  # the noisiest of the four
    _assert_parity(recording.signal, recording.fs)


@pytest.mark.parametrize("case", ["tall_t_slow", "paced", "baseline_jumps", "inverted"])
def test_parity_on_stress_cases(case):
    from pipeline.synth import stress_config, synthesize

    ecg = synthesize(stress_config(case, n_samples=200_000))
    _assert_parity(np.ascontiguousarray(ecg.signal), ecg.fs)


@pytest.mark.parametrize("fs", [128.0, 360.0])
def test_parity_where_t_waves_hide_beats(fs):
    """The rescue of the QRS complexes that a ventricular beat's tall T wave hid from the
    suppression (peaks.rescue_suppressed: the envelope's peaks, the per-peak checks' kernel with
    its likeness, the suppression run again among the peaks that pass): the GPU finds the CPU's
    beats, every hidden one among them."""
    import cupy

    from pipeline import peaks, wavelet
    from tests.support.hidden_beats import hidden_by_t_waves

    signal, beats, hidden = hidden_by_t_waves(fs, seconds=600.0)
    cfg = SignalConfig()
    cpu = peaks.find_beats(wavelet.ricker_response(signal, fs, cfg.ricker_width_s), signal, fs, cfg)
    on_gpu = cupy.asarray(signal)
    gpu = peaks.find_beats(wavelet.ricker_response(on_gpu, fs, cfg.ricker_width_s), on_gpu, fs, cfg)
    assert backend.is_cupy_array(gpu)
    np.testing.assert_array_equal(backend.to_host(gpu), cpu)
    assert (np.abs(hidden[:, None] - cpu[None, :]).min(axis=1) <= 2).all()
    _assert_parity(signal, fs)


def test_keep_the_rhythm_parity():
    """peaks.keep_the_rhythm on the GPU (the rhythm kernel: the rival search, then the shapes of
    the beats that may move) moves the same beats to the same samples as on the CPU: beats on a tall P wave, one
    alone and two in a row, back to their QRS complex."""
    import cupy

    from pipeline import peaks
    from tests.support.wrong_waves import on_the_wrong_wave

    fs, cfg = 360.0, SignalConfig()
    signal, env, thresholds, block, positions, beats = on_the_wrong_wave(fs)
    cpu = peaks.keep_the_rhythm(env, thresholds, block, signal, positions, fs, cfg)
    gpu = peaks.keep_the_rhythm(cupy.asarray(env), cupy.asarray(thresholds), block, cupy.asarray(signal),
                                cupy.asarray(positions), fs, cfg)
    assert backend.is_cupy_array(gpu)
    np.testing.assert_array_equal(backend.to_host(gpu), cpu)
    assert np.abs(cpu - beats).max() <= 2


def test_qrs_shape_kernel_parity(synthetic_ecg):
    """The QRS-shape kernel (despiked refinement, width, slope) gives the same numbers on both devices."""
    import cupy

    from pipeline import peaks, qrs, wavelet

    signal = np.ascontiguousarray(synthetic_ecg.signal)
    fs = synthetic_ecg.fs
    candidates = peaks.fiducials(wavelet.ricker_response(signal, fs, 0.025), fs)
    cpu = qrs.qrs_shape(signal, candidates, fs, search_s=0.05)
    gpu = qrs.qrs_shape(cupy.asarray(signal), cupy.asarray(candidates), fs, search_s=0.05)
    assert all(backend.is_cupy_array(a) for a in gpu)
    np.testing.assert_array_equal(backend.to_host(gpu[0]), cpu[0])
    np.testing.assert_array_equal(backend.to_host(gpu[1]), cpu[1])
    np.testing.assert_allclose(backend.to_host(gpu[2]), cpu[2], rtol=1e-5, atol=1e-6)
    kept_cpu = peaks.drop_non_qrs(signal, cpu[0], fs)
    kept_gpu = peaks.drop_non_qrs(cupy.asarray(signal), cupy.asarray(cpu[0]), fs)
    np.testing.assert_array_equal(backend.to_host(kept_gpu), kept_cpu)


def test_rhythm_and_combined_scores_parity(synthetic_ecg):
    """RR features, rhythm score and the shape + rhythm combination: CuPy equals NumPy."""
    import cupy

    from pipeline.rhythm import describe_rhythm
    from pipeline.score import combine_scores

    positions = synthetic_ecg.r_peaks
    cpu = describe_rhythm(positions, synthetic_ecg.fs)
    gpu = describe_rhythm(cupy.asarray(positions), synthetic_ecg.fs)
    for name in ("rr_pre", "rr_post", "prematurity", "local_rr_s", "score"):
        assert backend.is_cupy_array(getattr(gpu, name))
        np.testing.assert_allclose(backend.to_host(getattr(gpu, name)), getattr(cpu, name), rtol=1e-5, atol=1e-6,
                                   equal_nan=True)
    shape = np.random.default_rng(0).gamma(2.0, size=len(positions)).astype(np.float32)
    combined_cpu = combine_scores(shape, cpu.score)
    combined_gpu = combine_scores(cupy.asarray(shape), gpu.score)
    for a, b in zip(combined_gpu, combined_cpu):
        np.testing.assert_allclose(backend.to_host(a), b, rtol=1e-5)


def test_lead_choice_parity(tmp_path):
    """The loader picks the same lead, for the same reason, from cuDF and from pyarrow."""
    from pipeline.load import load_ecg
    from pipeline.synth import SynthConfig, synthesize

    ecg = synthesize(SynthConfig(n_samples=60_000, seed=4))
    noisy = ecg.signal * 0.3 + np.random.default_rng(0).standard_normal(ecg.signal.size).astype(np.float32) * 0.4
    path = tmp_path / "two.csv"
    np.savetxt(path, np.stack([noisy, ecg.signal], axis=1), delimiter=",", fmt="%.5f")
    gpu, cpu = load_ecg(path, device="gpu"), load_ecg(path, device="cpu")
    assert gpu.channel == cpu.channel == "column 1" and gpu.lead_reason == cpu.lead_reason


def test_load_parity_cudf_and_pyarrow(small_csv):
    from pipeline.load import load_ecg

    with backend.recording_handoffs() as ledger:
        gpu = load_ecg(small_csv, device="gpu")
    cpu = load_ecg(small_csv, device="cpu")
    np.testing.assert_allclose(backend.to_host(gpu.signal), cpu.signal, rtol=1e-6)  # two float parsers
    assert [(h.source, h.target, h.same_pointer) for h in ledger.entries] == [("cudf", "cupy", True)]


# --------------------------------------------------------------------------- VAE on the GPU
@pytest.fixture(scope="module")
def beats_and_cpu_model(synthetic_ecg):
    import torch

    from pipeline.train import fit_vae, split_train

    _, _, beats = _segment(np.ascontiguousarray(synthetic_ecg.signal), synthetic_ecg.fs)
    rows = torch.from_numpy(beats.rows)
    is_train = split_train(len(rows), 0.75, seed=0)
    model, _ = fit_vae(rows, is_train, VAEConfig(epochs=6))
    return beats, rows, is_train, model


def test_cpu_model_scores_the_same_on_the_gpu(beats_and_cpu_model):
    import copy

    import torch
    from scipy.stats import spearmanr

    from pipeline.score import score_beats

    _, rows, _, model = beats_and_cpu_model
    scores_cpu, z_cpu = score_beats(model, rows)
    gpu_model = copy.deepcopy(model).to("cuda")
    scores_gpu, z_gpu = score_beats(gpu_model, rows.to("cuda"))
    assert scores_gpu.device.type == "cuda" and z_gpu.device.type == "cuda"
    scores_gpu, z_gpu = scores_gpu.cpu(), z_gpu.cpu()
    # cuDNN may use TF32 convolutions: equal to about 1e-3, not bit for bit
    torch.testing.assert_close(scores_gpu, scores_cpu, rtol=1e-2, atol=1e-2 * float(scores_cpu.abs().max()))
    torch.testing.assert_close(z_gpu, z_cpu, rtol=1e-2, atol=1e-2 * float(z_cpu.abs().max()))
    assert spearmanr(scores_gpu.numpy(), scores_cpu.numpy()).statistic > 0.999


def test_vae_trained_on_the_gpu_finds_the_same_outliers(beats_and_cpu_model, synthetic_ecg):
    """Training on the GPU (bf16 autocast, CUDA random streams) gives a different model (after 6
    epochs the two rank the ordinary beats differently) that finds the outliers as well."""
    from pipeline.metrics import auroc
    from pipeline.score import score_beats
    from pipeline.train import fit_vae

    beats, rows, is_train, model = beats_and_cpu_model
    gpu_model, history = fit_vae(rows.to("cuda"), is_train, VAEConfig(epochs=6))
    assert np.isfinite(history).all() and history[-1] < history[0]
    scores_gpu = score_beats(gpu_model, rows.to("cuda"))[0].cpu().numpy()
    scores_cpu = score_beats(model, rows)[0].numpy()
    distance = np.abs(beats.fiducial[:, None] - synthetic_ecg.r_peaks[None, :])
    symbols = np.where(distance.min(axis=1) <= 0.15 * synthetic_ecg.fs, synthetic_ecg.symbols[distance.argmin(axis=1)], "")
    labelled, abnormal = symbols != "", np.isin(symbols, ("V", "A", "Q"))
    on_gpu, on_cpu = auroc(scores_gpu[labelled], abnormal[labelled]), auroc(scores_cpu[labelled], abnormal[labelled])
    assert on_gpu >= 0.9 and abs(on_gpu - on_cpu) <= 0.03, (on_gpu, on_cpu)


# --------------------------------------------------------------------------- CUDA graph training
def _fresh_step(rows, is_train, cfg, capture, adam=None):
    """A seeded model, its Adam (``pipeline.train.Adam`` unless ``adam`` names another class) and a
    training step on the GPU (as fit_vae builds them)."""
    import torch

    from pipeline.model import VAE
    from pipeline.train import Adam, batch_lengths, build_step, plan_training

    train_rows = rows[is_train.to(rows.device)]
    plan = plan_training(int(train_rows.shape[0]), cfg)
    torch.manual_seed(cfg.seed)
    model = VAE(rows.shape[1], cfg).to(rows.device)
    optimizer = (adam or Adam)(model.parameters(), lr=plan.learning_rate, fused=True, capturable=capture)
    noise = torch.Generator(device=rows.device).manual_seed(7)  # the same draws for both kinds of step
    step = build_step(model, optimizer, train_rows, batch_lengths(int(train_rows.shape[0]), plan), noise,
                      capture=capture)
    return model, step, plan


@pytest.fixture
def full_float32():
    """cuDNN and cuBLAS in full float32 for the test: with TF32 (PyTorch's default for cuDNN's
    convolutions) two plain trainings of the same batches part by ~2e-5 after one step and, Adam
    scaling every gradient to ~lr, by ~1e-3 after six; without it they stay within ~1e-7."""
    import torch

    flags = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


def test_captured_step_equals_plain_steps(beats_and_cpu_model, full_float32):
    """Replaying the captured graphs does what the plain step does: the same weights after the
    same batches and noise draws, the last, shorter batch of the epoch included (each replay reads the
    new indices, gradients are not accumulated across replays, Adam counts its steps), up to the
    order of floating-point sums (in full float32: TF32's differ from run to run). Only the steps
    hold the optimisers (as in ``_fresh_step``): a step that let its optimiser go would replay into
    freed memory, here the batches' indices."""
    import torch

    from pipeline.train import epoch_batches

    _, rows, is_train, _ = beats_and_cpu_model
    rows = rows.to("cuda")
    cfg = VAEConfig(batch_size=64)  # 64 does not divide the ~1,400 training beats: two batch lengths
    plain_model, plain, plan = _fresh_step(rows, is_train, cfg, capture=False)
    captured_model, captured, _ = _fresh_step(rows, is_train, cfg, capture=True)
    assert captured.captured and not plain.captured
    for a, b in zip(plain_model.parameters(), captured_model.parameters()):  # the capture's warm-up was undone
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    initial = [p.detach().clone() for p in plain_model.parameters()]
    batches = epoch_batches(int(is_train.sum()), plan, torch.Generator(device="cuda").manual_seed(3))
    assert len(batches[-1]) < plan.batch  # the test covers both graphs
    for index in batches[:4] + batches[-1:] + batches[4:6]:
        plain(index)
        captured(index)
    torch.cuda.synchronize()
    moved = max(float((p.detach() - q).abs().max()) for p, q in zip(plain_model.parameters(), initial))
    assert moved > 2 * cfg.learning_rate  # the steps really changed the weights...
    for a, b in zip(plain_model.parameters(), captured_model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)  # ...the same way (Adam moves ~lr = 4e-3 a step)
    torch.testing.assert_close(captured.loss_sum, plain.loss_sum, rtol=1e-4, atol=0)


def test_fused_adam_makes_torch_optim_adams_updates(beats_and_cpu_model):
    """On the GPU, the project's fused Adam and ``torch.optim.Adam(fused=True)``, plain steps from
    the same weights on the same batches and noise: the same weights after them."""
    import torch

    from pipeline.train import epoch_batches

    _, rows, is_train, _ = beats_and_cpu_model
    rows = rows.to("cuda")
    cfg = VAEConfig(batch_size=64)
    ours_model, ours, plan = _fresh_step(rows, is_train, cfg, capture=False)
    theirs_model, theirs, _ = _fresh_step(rows, is_train, cfg, capture=False, adam=torch.optim.Adam)
    initial = [p.detach().clone() for p in ours_model.parameters()]
    for index in epoch_batches(int(is_train.sum()), plan, torch.Generator(device="cuda").manual_seed(3))[:8]:
        ours(index)
        theirs(index)
    torch.cuda.synchronize()
    assert max(float((p.detach() - q).abs().max()) for p, q in zip(ours_model.parameters(), initial)) > 2 * cfg.learning_rate
    # Adam moves a weight ~lr (4e-3) a step; 1e-3 is a quarter of one step. cuDNN's convolution
    # gradients are not bit-reproducible, and Adam's normalization magnifies that where a gradient is
    # near zero: H200s differed by 2.2e-5 on 2 of 2,560 weights, and by 3.4e-4 on 66 of 65,536 with
    # every beat in the table (edge rows zero-padded), after 8 steps. A wrong update misses by ~lr.
    for a, b in zip(theirs_model.parameters(), ours_model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-3)


def test_captured_training_finds_the_same_outliers(beats_and_cpu_model, synthetic_ecg):
    """fit_vae with and without the CUDA graph: same epochs, nearly the same losses and scores.
    (Step for step the two are equal: test_captured_step_equals_plain_steps. Over 8 epochs cuDNN's
    nondeterministic sums move any two trainings apart, plain ones too: on H200 machines the median
    score difference measured 2.05 % and 3.24 %, an AUROC difference 0.021. So the captured run may
    differ from a plain one by 3 %, or by twice as much as a second plain run does.)"""
    import warnings

    import torch
    from scipy.stats import spearmanr

    from pipeline import PipelineWarning
    from pipeline.metrics import auroc
    from pipeline.score import score_beats
    from pipeline.train import fit_vae

    beats, rows, is_train, _ = beats_and_cpu_model
    rows = rows.to("cuda")
    cfg = VAEConfig(epochs=8)
    fits = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipelineWarning)  # a capture that falls back to plain steps fails here
        for name, graph in (("plain", False), ("graph", True), ("plain again", False)):
            model, history = fit_vae(rows, is_train, replace(cfg, cuda_graph=graph))
            fits[name] = (history, score_beats(model, rows)[0].cpu().numpy())
    (plain_history, plain), (graph_history, graph) = fits["plain"], fits["graph"]

    def median_difference(a, b):
        return np.median(np.abs(a - b) / np.abs(b))

    assert len(graph_history) == len(plain_history) and np.isfinite(graph_history).all()
    np.testing.assert_allclose(graph_history, plain_history, rtol=0.02)
    assert spearmanr(graph, plain).statistic > 0.99
    assert median_difference(graph, plain) < max(0.03, 2 * median_difference(fits["plain again"][1], plain))
    distance = np.abs(beats.fiducial[:, None] - synthetic_ecg.r_peaks[None, :])
    symbols = np.where(distance.min(axis=1) <= 0.15 * synthetic_ecg.fs, synthetic_ecg.symbols[distance.argmin(axis=1)], "")
    labelled, abnormal = symbols != "", np.isin(symbols, ("V", "A", "Q"))
    assert auroc(graph[labelled], abnormal[labelled]) >= 0.9
    assert abs(auroc(graph[labelled], abnormal[labelled]) - auroc(plain[labelled], abnormal[labelled])) <= 0.03
    assert torch.cuda.get_allocator_backend() == "native"


# --------------------------------------------------------------------------- zero copy
def test_run_pipeline_on_gpu_hands_off_without_copies(small_csv, cpu_run, tmp_path):
    from pipeline.run import RunRequest, run_pipeline

    run = run_pipeline(RunRequest(input=str(small_csv), device="gpu", out=str(tmp_path), vae=VAEConfig(epochs=2)))
    report = run.report
    assert report["device"]["name"] == "gpu" and "gpu" in report["device"]
    pairs = {(h["source"], h["target"]): h for h in report["handoffs"]}
    for pair in [("cudf", "cupy"), ("cupy", "numba.cuda"), ("cupy", "torch"), ("torch", "cupy")]:
        assert pair in pairs, f"missing hand-off {pair}: {sorted(pairs)}"
    assert all(h["same_pointer"] for h in report["handoffs"]), [h for h in report["handoffs"] if not h["same_pointer"]]
    assert ("numpy", "cupy") not in pairs  # the CSV went straight to the device through cuDF
    assert report["memory"]["gpu_peak_rmm_bytes"] > 0 and report["memory"]["gpu_peak_torch_bytes"] > 0
    assert report["memory"]["gpu_peak_bytes"] == report["memory"]["gpu_peak_rmm_bytes"] + report["memory"]["gpu_peak_torch_bytes"]
    # the same beats as on the CPU
    common = np.intersect1d(run.fiducials, cpu_run.run.fiducials)
    assert len(common) >= 0.999 * len(cpu_run.run.fiducials)
    assert set(run.beats.columns) == set(cpu_run.run.beats.columns)
    # the calibrated score needs no training: the same beats get the same score on either device
    gpu_beats = run.beats.set_index("fiducial").loc[common]
    cpu_beats = cpu_run.run.beats.set_index("fiducial").loc[common]
    np.testing.assert_allclose(gpu_beats["score"], cpu_beats["score"], rtol=0, atol=0.05)
    assert run.report["reference"] == cpu_run.run.report["reference"]


def test_zero_copy_chain_cudf_cupy_numba_torch():
    import cudf
    import cupy
    import numba.cuda
    import torch

    values = np.arange(1 << 20, dtype=np.float32)
    series = cudf.Series(values)
    pointer = series.__cuda_array_interface__["data"][0]
    with backend.recording_handoffs() as ledger:
        array = backend.cudf_to_cupy(series)
        kernel_view = backend.as_kernel_array(array)
        tensor = backend.to_torch(array)
        back = backend.from_torch(tensor, cupy)
    assert array.data.ptr == pointer
    assert kernel_view.__cuda_array_interface__["data"][0] == pointer
    assert tensor.data_ptr() == pointer and tensor.device.type == "cuda"
    assert back.data.ptr == pointer
    assert [(h.source, h.target) for h in ledger.entries] == [("cudf", "cupy"), ("cupy", "numba.cuda"),
                                                              ("cupy", "torch"), ("torch", "cupy")]
    assert all(h.same_pointer and h.nbytes == values.nbytes for h in ledger.entries)
    # Numba → torch directly, through the CUDA array interface
    from_numba = torch.as_tensor(numba.cuda.as_cuda_array(array), device="cuda")
    assert from_numba.data_ptr() == pointer
    # one buffer: a write through torch is seen by CuPy and Numba
    tensor[7] = -1.0
    torch.cuda.synchronize()
    assert float(array[7]) == -1.0 and float(kernel_view[7]) == -1.0 and float(back[7]) == -1.0


def test_ledger_records_a_copy_as_a_copy():
    with backend.recording_handoffs() as ledger:
        backend.host_to_device(np.zeros(1000, np.float32))
    (entry,) = ledger.entries
    assert (entry.source, entry.target, entry.same_pointer, entry.nbytes) == ("numpy", "cupy", False, 4000)


# --------------------------------------------------------------------------- one RMM pool
def _total_bytes() -> int:
    """Bytes ever allocated through the current RMM resource (the statistics adaptor)."""
    import rmm

    counts = rmm.mr.get_current_device_resource().allocation_counts
    return int(counts["total_bytes"] if isinstance(counts, dict) else counts.total_bytes)


def test_rmm_pool_is_installed():
    import rmm

    pool = backend.use_rmm_pool()  # idempotent: the one conftest installed
    assert backend.use_rmm_pool() is pool
    assert isinstance(pool, rmm.mr.StatisticsResourceAdaptor)
    assert rmm.mr.get_current_device_resource() is pool


@pytest.mark.parametrize("library", ["cupy", "numba", "cudf"])
def test_rmm_is_the_allocator(library):
    import cupy

    n = 16 << 20  # 16 Mi float32 = 64 MiB: far above any stray allocation in between
    source = cupy.zeros(n, dtype=cupy.float32) if library == "cudf" else None
    before = _total_bytes()
    if library == "cupy":
        backend.free_cached_blocks()  # CuPy's pool over RMM may hold a freed block of this size
        before = _total_bytes()
        buffer = cupy.empty(n, dtype=cupy.float32)
    elif library == "numba":
        import numba.cuda
        from rmm.allocators.numba import RMMNumbaManager

        assert isinstance(numba.cuda.current_context().memory_manager, RMMNumbaManager)
        buffer = numba.cuda.device_array(n, dtype=np.float32)
    else:
        import cudf

        buffer = cudf.Series(source).astype("float64")  # a new 8-byte column, allocated by cuDF
    assert _total_bytes() - before >= 4 * n, f"{library} did not allocate through RMM"
    del buffer


POOL_AFTER_CUDF = """
import sys
import cupy
import rmm
from pipeline import backend, load

backend.use_rmm_pool()
load.load_ecg(sys.argv[1], device="gpu")            # the first cuDF import of the process
stats = rmm.mr.get_current_device_resource()


def allocations():
    counts = stats.allocation_counts
    return int(counts["total_count"] if isinstance(counts, dict) else counts.total_count)


block = cupy.empty(1 << 20, dtype=cupy.float32)
del block
before = allocations()
for _ in range(20):
    block = cupy.empty(1 << 20, dtype=cupy.float32)  # the same size again and again
    del block
print(allocations() - before)
"""


def test_cupy_keeps_its_block_pool_after_cudf_is_imported(small_csv):
    """Importing cuDF makes RMM's allocator CuPy's; the pipeline imports it through
    backend.import_cudf, which puts CuPy's block pool back: a freed block is handed out again
    without a new allocation from RMM. A fresh process, so that cuDF's import comes after the pool."""
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run([sys.executable, "-c", POOL_AFTER_CUDF, str(small_csv)], capture_output=True,
                            text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip().splitlines()[-1]) == 0, "CuPy allocated from RMM again: its pool is gone"


def test_torch_keeps_its_own_allocator():
    """PyTorch allocates through its caching allocator, not RMM: CUDA graph capture needs its
    graph-private pools (backend.use_rmm_pool says why)."""
    import torch

    n = 16 << 20
    before = _total_bytes()
    buffer = torch.empty(n, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    assert torch.cuda.get_allocator_backend() == "native"
    assert _total_bytes() - before < 4 * n and torch.cuda.memory_allocated() >= 4 * n
    del buffer


CACHE_SCRIPT = """
import json
import cupy
import numpy
from pipeline import _decision_kernels, _episode_kernels, _hum_kernels, _kernels, _rhythm_kernels, _shape_kernels
from pipeline import embed, episodes, peaks
from pipeline import quality, wavelet
fs = 250.0
t = cupy.arange(60 * 250) / fs
signal = cupy.exp(-((t % 0.8) - 0.4) ** 2 / 2e-4).astype(cupy.float32)
from pipeline.config import SignalConfig
positions = peaks.find_beats(wavelet.ricker_response(signal, fs, 0.025), signal, fs, SignalConfig())
peaks._gap_peaks(cupy.abs(signal), cupy.asarray([40]), cupy.asarray([60]), 12, 4, 5.0)  # no long gap above
slow, keep = cupy.zeros(positions.shape[0], cupy.uint8), cupy.ones(positions.shape[0], bool)
_rhythm_kernels.launch("early_beats", 1, signal, positions, slow, 38, numpy.float32(1.0), 1.5, keep)  # none slow above
one = [cupy.empty(1, dtype) for dtype in (cupy.int64, cupy.int32, cupy.float32, cupy.int64, bool)]
_rhythm_kernels.launch("narrow", 1, signal, positions[:1].copy(), *peaks._shape_settings(fs, SignalConfig()), 0.0, 1.5,
                       cupy.ones(2), 1.5, *one)  # no long gap above
embed.embed_beats(signal, positions, fs, width=256)
found = episodes.find_episodes(signal, fs, positions)
episodes.in_episodes(positions, found, fs)
quality.beat_quality(signal, positions, fs)
kernels = {**_kernels._cuda_kernels(), **_episode_kernels._episode_cuda_kernels(),
           **_decision_kernels._decision_cuda_kernels(), **_rhythm_kernels._rhythm_cuda_kernels(),
           **_hum_kernels._hum_cuda_kernels(), **_shape_kernels._shape_cuda_kernels()}
print(json.dumps({name: [sum(k._cache_hits.values()), sum(k._cache_misses.values())] for name, k in kernels.items()}))
"""


def test_cuda_kernels_come_from_the_disk_cache_in_a_new_process():
    """The second process on a machine loads every Numba CUDA kernel from the disk cache instead of
    compiling them (the first may compile, or hit a cache an earlier run left)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    def counts():
        result = subprocess.run([sys.executable, "-c", CACHE_SCRIPT], capture_output=True, text=True, timeout=300,
                                cwd=Path(__file__).resolve().parents[1])
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    counts()
    second = counts()
    assert second == {name: [1, 0] for name in ("nms", "chunk_maxima", "noise_floor", "embed", "qrs_shape", "rhythm", "non_qrs", "early_beats",
                                                "gap_bounds", "narrow", "deflection", "gap_peaks", "unsuppressed", "block_stats", "beat_range", "beat_stats", "tick_measures",
                                                "flutter_frames", "flutter_measures", "flutter_flags", "tick_severity",
                                                "runs", "in_spans", "beat_quality", "hum_bins", "hum_lines")}, second


# --------------------------------------------------------------------------- the two dashboard boards
@pytest.fixture(scope="module")
def gpu_shared(small_csv, tmp_path_factory):
    """A GPU run of ``small_csv`` with the shared data of both boards (cuDF frames for cuxfilter)."""
    from dashboard import cuxfilter_board
    from dashboard.shared_run import SharedRun
    from pipeline.run import RunRequest, run_pipeline

    run = run_pipeline(RunRequest(input=str(small_csv), device="gpu", out=str(tmp_path_factory.mktemp("runs")),
                                  vae=VAEConfig(epochs=2)))
    shared = SharedRun.from_run(run)
    cuxfilter_board.prepare(shared)
    return shared


def _board_session(shared, kind: str):
    """One session's page (store, board) in its own document, with the given board."""
    from bokeh.document import Document
    from panel.io.state import set_curdoc

    from dashboard.charts import BokehBoard
    from dashboard.cuxfilter_board import CuxfilterBoard
    from dashboard.data_store import DataStore
    from dashboard.page import layout

    doc = Document()
    with set_curdoc(doc):
        store = DataStore(shared)
        board = CuxfilterBoard(store) if kind == "cuxfilter" else BokehBoard(store)
        body, _ = layout(store, board)
        doc.add_root(body.get_root(doc))
    return doc, store, board


CACHED_FIRST_PAGE = """
import ctypes, json, sys
from bokeh.document import Document
from panel.io.state import set_curdoc
from dashboard import app, startup
from dashboard.data_store import DataStore
from dashboard.page import layout
from pipeline.run import run_pipeline

settings = startup.settings_from(sys.argv[1:], {})
run = run_pipeline(settings.request)
shared = app.prepare(settings)(run)
doc = Document()
with set_curdoc(doc):
    store = DataStore(shared)
    body, _ = layout(store, app.make_board(store))
    doc.add_root(body.get_root(doc))
cuda = ctypes.CDLL("libcuda.so.1")      # the driver's own view: has anything made the context?
flags, active = ctypes.c_uint(), ctypes.c_int()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active)) == 0
print(json.dumps({"cached": bool(run.cached), "device": shared.device, "models": len(doc.models),
                  "context": bool(active.value), "cupy": "cupy" in sys.modules}))
"""


def test_a_cached_gpu_start_builds_its_first_page_without_cuda(small_csv, tmp_path):
    """A server starting from a cached GPU run reads it and builds its first page without importing
    CuPy (~0.3 s), creating CUDA's context (~0.15 s) or uploading the recording (its raster's levels
    are built after the first page); checked in a fresh process, the context through the driver."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from dashboard.startup import settings_from
    from pipeline.run import run_pipeline

    args = ["--input", str(small_csv), "--device", "gpu", "--epochs", "1", "--out", str(tmp_path / "runs")]
    run_pipeline(settings_from(args, {}).request)
    result = subprocess.run([sys.executable, "-c", CACHED_FIRST_PAGE, *args], capture_output=True, text=True,
                            timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["cached"] and seen["device"] == "gpu" and seen["models"] > 100, seen
    assert not seen["context"], "a cached start made CUDA's context before its first page"
    assert not seen["cupy"], "a cached start imported CuPy before its first page"


CUPY_IMPORTED_MEANWHILE = """
import json, sys, threading
import numpy as np
from pipeline import backend

importing = threading.Thread(target=lambda: __import__("cupy"))
importing.start()
checks = half = 0
while importing.is_alive():      # what a session built meanwhile asks of its arrays
    half += "cupy" in sys.modules and not hasattr(sys.modules["cupy"], "ndarray")
    assert not backend.is_cupy_array(np.zeros(1)) and backend.to_host(np.ones(1))[0] == 1
    checks += 1
importing.join()
import cupy
print(json.dumps({"checks": checks, "half_imported": half, "after": backend.is_cupy_array(cupy.zeros(1))}))
"""


def test_arrays_are_told_apart_while_cupy_is_being_imported():
    """The dashboard imports CuPy in the background after a cached start's first page; a session
    built meanwhile asks whether its arrays are CuPy's while ``sys.modules`` holds CuPy half
    initialised (an H200 server failed a second visitor's page with "partially initialized
    module 'cupy' has no attribute 'ndarray'"). In a fresh process, where CuPy is not imported yet."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    result = subprocess.run([sys.executable, "-c", CUPY_IMPORTED_MEANWHILE], capture_output=True, text=True,
                            timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["half_imported"] > 0, seen      # the checks did meet CuPy half imported
    assert seen["after"], seen


def test_beat_columns_on_host_or_gpu_select_alike(gpu_shared):
    """A GPU run of few beats keeps its beat columns on the host (a brush's small operations cost
    less there) and its recording on the GPU; with the columns on the GPU instead (as for a run of
    many beats) the same brushes select the same beats, bars and mean beat."""
    import cupy
    from panel.io.state import set_curdoc

    from dashboard.recording_view import signal_raster
    from dashboard.shared_run import GPU_COLUMNS_MIN_BEATS, SharedRun

    host = gpu_shared
    assert len(host.beats) < GPU_COLUMNS_MIN_BEATS and host.xp is np and host.device == "gpu"
    assert isinstance(signal_raster(host).levels[0].y, cupy.ndarray), "the recording is drawn on the GPU"
    on_gpu = SharedRun.from_run(host.run, columns_device="gpu")
    assert on_gpu.xp is cupy and isinstance(on_gpu.columns["score"], cupy.ndarray)
    (host_doc, host_store, host_board), (gpu_doc, gpu_store, gpu_board) = (
        _board_session(host, "bokeh"), _board_session(on_gpu, "bokeh"))
    beats = host.beats
    z1, z2 = np.quantile(beats["z1"], [0.1, 0.8]), np.quantile(beats["z2"], [0.2, 0.9])
    lengths = np.nanquantile(beats["length_s"], [0.2, 0.7])  # the last beat has no length
    for doc, board in ((host_doc, host_board), (gpu_doc, gpu_board)):
        with set_curdoc(doc):
            board.charts["latent"].brush.bounds = [*map(float, z1), *map(float, z2)]
            board.charts["lengths"].brush.bounds = list(map(float, lengths))
    a, b = host_store.selection, gpu_store.selection
    assert 0 < a.count == b.count < len(beats)
    np.testing.assert_allclose(a.centre.mean_beat, b.centre.mean_beat, rtol=1e-5, atol=1e-6)
    for view in ("scores", "lengths"):       # histograms: the bars of what the other brushes select
        np.testing.assert_array_equal(np.nan_to_num(host_board.charts[view].source.data["selected"]),
                                      np.nan_to_num(gpu_board.charts[view].source.data["selected"]))
    # A plane's picture: opacity from the counts, exactly; colour from each pixel's mean score
    # percentile, summed in another order on the GPU, so a pixel at a palette step's edge may take
    # the next step (seen: 1 of 19,200).
    host_rgba, gpu_rgba = (board.charts["poincare"].foreground.data["image"][0].view(np.uint8)
                           for board in (host_board, gpu_board))
    np.testing.assert_array_equal(host_rgba[..., 3::4], gpu_rgba[..., 3::4])
    assert np.mean(host_rgba != gpu_rgba) < 1e-3


def _cuxfilter_box(chart, x: tuple[float, float], y: tuple[float, float] | None) -> None:
    """What the server does with a box selection on a cuxfilter chart: its selection stream's event."""
    stream = chart.chart.box_stream
    y = y or (0.0, 1.0)
    stream.event(bounds=(x[0], y[0], x[1], y[1]), x_selection=x, y_selection=y)


def test_cuxfilter_board_shows_the_default_boards_counts(gpu_shared):
    """The same brush through the cuxfilter board (a box selection on its chart) and the default
    board (its Brush model), each in its own session on one GPU run: both select as many beats as
    pandas finds in the brushed range, cuxfilter's own filtered frame holds that many, and the
    default board's bars of the other histogram equal a histogram of cuxfilter's filtered beats."""
    from panel.io.state import set_curdoc

    from dashboard.spec import VIEWS

    shared = gpu_shared
    beats = shared.beats.astype({c: "float64" for c in ("length_s", "z1", "z2", "score")})
    cux_doc, cux_store, cux = _board_session(shared, "cuxfilter")
    ref_doc, ref_store, ref = _board_session(shared, "bokeh")
    cases = [("lengths", np.nanquantile(beats["length_s"], [0.2, 0.7]), None, "scores"),
             ("scores", np.quantile(beats["score"], [0.0, 0.8]), None, "lengths"),
             ("latent", np.quantile(beats["z1"], [0.1, 0.8]), np.quantile(beats["z2"], [0.2, 0.9]), "lengths")]
    for view, x, y, other in cases:
        with set_curdoc(cux_doc):
            cux_store.clear()
            _cuxfilter_box(cux.charts[view], tuple(map(float, x)), None if y is None else tuple(map(float, y)))
        brush = dict(cux_store.brush)
        assert set(brush) == set(VIEWS[view].brush), f"the cuxfilter box on {view} gave the brush {brush}"
        with set_curdoc(ref_doc):
            ref_store.clear()
            ref.charts[view].brush.bounds = [v for column in VIEWS[view].brush for v in brush[column]]
        assert ref_store.brush == brush

        inside = np.ones(len(beats), dtype=bool)
        for column, (lo, hi) in brush.items():
            inside &= beats[column].between(lo, hi).to_numpy()
        want = int(inside.sum())
        assert 0 < want < len(beats)
        assert cux_store.selection.count == ref_store.selection.count == want
        assert cux.filtered_count() == want, "cuxfilter's charts filter a different set of beats"

        dashboard = cux.dashboard
        filtered = dashboard._query(dashboard._generate_query_str()).to_pandas()
        chart = ref.charts[other]
        edges = chart.bins.edges[0]
        values = np.clip(filtered[VIEWS[other].x].to_numpy(dtype=np.float64), edges[0], edges[-1])
        shown = np.nan_to_num(chart.source.data["selected"]).astype(np.int64)
        np.testing.assert_array_equal(shown, np.histogram(values, bins=edges)[0])


def test_cuxfilter_board_filters_by_columns_no_chart_draws(gpu_shared):
    """A family clicked in the families panel brushes ``family``, which no cuxfilter chart draws:
    the cuxfilter board filters its frame by it all the same, to the count pandas finds."""
    from panel.io.state import set_curdoc

    shared = gpu_shared
    doc, store, cux = _board_session(shared, "cuxfilter")
    families = shared.beats["family"].to_numpy()
    for family in np.unique(families)[:3]:
        with set_curdoc(doc):
            store.clear()
            store.select_range("family", float(family), float(family))
        want = int((families == family).sum())
        assert store.selection.count == cux.filtered_count() == want


def test_the_recordings_levels_on_the_gpu_are_the_hosts():
    """The one-kernel min/max trace of the recording's levels (dashboard.signal_raster) gives the
    points of NumPy's argmin/argmax trace, the first of equal extremes included, at every level's
    block size and with a partial last block."""
    import cupy

    from dashboard.signal_raster import min_max_trace

    rng = np.random.default_rng(11)
    for signal in (rng.standard_normal(100_003).astype(np.float32),
                   rng.integers(-3, 4, 100_003).astype(np.float32)):      # many equal extremes
        for block in (4, 16, 64, 4096):
            t_host, y_host = min_max_trace(signal, block, 250.0)
            t_gpu, y_gpu = min_max_trace(cupy.asarray(signal), block, 250.0)
            np.testing.assert_array_equal(backend.to_host(t_gpu), t_host)
            np.testing.assert_array_equal(backend.to_host(y_gpu), y_host)
