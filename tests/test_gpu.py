"""GPU tests (CUDA, CuPy, cuDF, Numba CUDA, RMM): CPU/GPU parity of every step, zero-copy hand-offs
between the libraries, and one RMM pool as the allocator of all of them. Skipped without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import backend
from pipeline.config import SignalConfig, VAEConfig

pytestmark = pytest.mark.gpu  # conftest skips these without a usable CUDA GPU, CuPy and cuDF


def _segment(signal, fs, cfg=SignalConfig()):
    """Ricker response, fiducials and embedded beats of ``signal`` on its own device (as run.py chains them)."""
    from pipeline import embed, peaks, wavelet

    response = wavelet.ricker_response(signal, fs, cfg.ricker_width_s)
    positions = peaks.fiducials(response, fs, refractory_s=cfg.refractory_s, threshold=cfg.threshold,
                                level_block_s=cfg.level_block_s, level_blocks=cfg.level_blocks)
    positions = peaks.refine_to_extremum(signal, positions, fs, search_s=cfg.refine_s)
    beats = embed.embed_beats(signal, positions, fs, width=cfg.window(fs), pre_fiducial=cfg.pre_fiducial,
                              min_beat_s=cfg.min_beat_s, max_beat_s=cfg.max_beat_s)
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
    """Training on the GPU (bf16 autocast, CUDA random streams) gives a different model but the same
    ranking of beats, and the same outliers."""
    from scipy.stats import spearmanr

    from pipeline.evaluate import auroc
    from pipeline.score import score_beats
    from pipeline.train import fit_vae

    beats, rows, is_train, model = beats_and_cpu_model
    gpu_model, history = fit_vae(rows.to("cuda"), is_train, VAEConfig(epochs=6))
    assert np.isfinite(history).all() and history[-1] < history[0]
    scores_gpu = score_beats(gpu_model, rows.to("cuda"))[0].cpu().numpy()
    scores_cpu = score_beats(model, rows)[0].numpy()
    assert spearmanr(scores_gpu, scores_cpu).statistic > 0.9
    distance = np.abs(beats.fiducial[:, None] - synthetic_ecg.r_peaks[None, :])
    symbols = np.where(distance.min(axis=1) <= 0.15 * synthetic_ecg.fs, synthetic_ecg.symbols[distance.argmin(axis=1)], "")
    labelled = symbols != ""
    assert auroc(scores_gpu[labelled], np.isin(symbols, ("V", "A", "Q"))[labelled]) >= 0.9


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
    assert report["memory"]["gpu_peak_bytes"] > 0
    # the same beats as on the CPU
    common = np.intersect1d(run.fiducials, cpu_run.run.fiducials)
    assert len(common) >= 0.999 * len(cpu_run.run.fiducials)
    assert set(run.beats.columns) == set(cpu_run.run.beats.columns)


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


@pytest.mark.parametrize("library", ["cupy", "torch", "numba", "cudf"])
def test_rmm_is_the_allocator(library):
    import cupy

    n = 16 << 20  # 16 Mi float32 = 64 MiB: far above any stray allocation in between
    source = cupy.zeros(n, dtype=cupy.float32) if library == "cudf" else None
    before = _total_bytes()
    if library == "cupy":
        from rmm.allocators.cupy import rmm_cupy_allocator

        assert cupy.cuda.get_allocator() is rmm_cupy_allocator
        buffer = cupy.empty(n, dtype=cupy.float32)
    elif library == "torch":
        import torch

        buffer = torch.empty(n, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
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


# --------------------------------------------------------------------------- the two dashboard boards
@pytest.fixture(scope="module")
def gpu_shared(small_csv, tmp_path_factory):
    """A GPU run of ``small_csv`` with the shared data of both boards (cuDF frames for cuxfilter)."""
    from dashboard import cuxfilter_board
    from dashboard.data_store import SharedRun
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
    from dashboard.views import layout

    doc = Document()
    with set_curdoc(doc):
        store = DataStore(shared)
        board = CuxfilterBoard(store) if kind == "cuxfilter" else BokehBoard(store)
        body, _ = layout(store, board)
        doc.add_root(body.get_root(doc))
    return doc, store, board


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
    cases = [("lengths", np.quantile(beats["length_s"], [0.2, 0.7]), None, "scores"),
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
