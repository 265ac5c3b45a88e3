"""The planned launch of Numba's CUDA kernels (:mod:`pipeline._launch`) against Numba's own
dispatcher and the kernels' CPU twins. Skipped without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import _kernels, _launch, backend

pytestmark = pytest.mark.gpu  # conftest skips these without a usable CUDA GPU, CuPy and cuDF


def _nms_inputs(xp, n=50_000, block=1000):
    rng = np.random.default_rng(3)
    envelope = rng.random(n).astype(np.float32)
    envelope[::7] = envelope[::7] * 3     # plateaus and ties
    envelope[100:110] = 5.0
    threshold = rng.random(n // block + 1).astype(np.float32) * 1.5
    return xp.asarray(envelope), xp.asarray(threshold), block


_SIZE = 8


def _maxima(xp, envelope):
    """The nms kernel's chunk maxima of ``envelope``, by NumPy."""
    host = backend.to_host(envelope)
    padded = np.full(-(-host.size // _SIZE) * _SIZE, -np.inf, np.float32)
    padded[:host.size] = host
    return xp.asarray(padded.reshape(-1, _SIZE).max(axis=1))


def test_planned_launches_equal_the_dispatchers_and_the_cpu_twin():
    import cupy

    envelope, threshold, block = _nms_inputs(cupy)
    kernel = _kernels._cuda_kernels()["nms"]
    n = int(envelope.shape[0])
    blocks = -(-n // _launch.THREADS_PER_BLOCK)
    by_dispatcher = cupy.zeros(n, dtype=cupy.uint8)
    maxima = _maxima(cupy, envelope)
    kernel[blocks, _launch.THREADS_PER_BLOCK](n, backend.as_kernel_array(envelope),
                                               backend.as_kernel_array(threshold), block, 25,
                                               backend.as_kernel_array(maxima), _SIZE,
                                               backend.as_kernel_array(by_dispatcher))
    host_env, host_thr = backend.to_host(envelope), backend.to_host(threshold)
    on_cpu = np.zeros(n, dtype=np.uint8)
    _kernels._CPU["nms"](n, host_env, host_thr, block, 25, backend.to_host(maxima), _SIZE, on_cpu)
    planned = []
    for half in (25, 25, 25):   # the first launch plans, the next ones follow the plan
        gate = cupy.full(n, 7, dtype=cupy.uint8)
        _launch.launch(kernel, blocks, _launch.THREADS_PER_BLOCK,
                       (n, envelope, threshold, block, half, maxima, _SIZE, gate))
        planned.append(backend.to_host(gate))
    assert on_cpu.sum() > 100
    for gate in planned:
        np.testing.assert_array_equal(gate, backend.to_host(by_dispatcher))
        np.testing.assert_array_equal(gate, on_cpu)
    key = next(k for k in _launch._PLANS if k[0] is kernel)
    assert _launch._PLANS[key] is not None, "nms kept the dispatcher's path"


def test_a_plan_passes_scalars_by_their_numba_type():
    """A NumPy int32 and a Python int give two plans; each passes its value as its own C type
    (a wrong width would read the neighbouring argument's bytes)."""
    import cupy

    envelope, threshold, block = _nms_inputs(cupy, n=20_000)
    n = int(envelope.shape[0])
    maxima = _maxima(cupy, envelope)
    expected = np.zeros(n, dtype=np.uint8)
    _kernels._CPU["nms"](n, backend.to_host(envelope), backend.to_host(threshold), block, 9, backend.to_host(maxima),
                         _SIZE, expected)
    for half in (9, np.int32(9), np.int64(9), 9, np.int32(9)):
        gate = cupy.zeros(n, dtype=cupy.uint8)
        _kernels.launch("nms", n, envelope, threshold, block, half, maxima, _SIZE, gate)
        np.testing.assert_array_equal(backend.to_host(gate), expected)


def test_2d_and_strided_arrays_follow_their_layout():
    """The embedding kernel writes 2-D rows; a strided (non-contiguous) input view takes its own
    plan ('A' layout) and reads its elements by their strides."""
    import cupy

    rng = np.random.default_rng(5)
    signal = rng.standard_normal(40_000).astype(np.float32)
    positions = np.sort(rng.choice(np.arange(200, 19_000), 60, replace=False)).astype(np.int64)
    on_gpu = cupy.asarray(signal)
    for host_view, gpu_view in ((signal[:20_000], on_gpu[:20_000]), (signal[::2], on_gpu[::2])):
        expected = np.zeros((60, 90), dtype=np.float32)
        _kernels._CPU["embed"](60, np.ascontiguousarray(host_view), positions, 30, expected)
        for _ in range(2):
            rows = cupy.full((60, 90), np.nan, dtype=cupy.float32)
            _kernels.launch("embed", 60, gpu_view, cupy.asarray(positions), 30, rows)
            np.testing.assert_allclose(backend.to_host(rows), expected, rtol=0, atol=1e-6)


def test_planned_launches_record_their_handoffs_as_zero_copy():
    import cupy

    envelope, threshold, block = _nms_inputs(cupy, n=5_000)
    gate, maxima = cupy.zeros(5_000, dtype=cupy.uint8), _maxima(cupy, envelope)
    _kernels.launch("nms", 5_000, envelope, threshold, block, 4, maxima, _SIZE, gate)   # planned, if no test did yet
    with backend.recording_handoffs() as ledger:
        _kernels.launch("nms", 5_000, envelope, threshold, block, 4, maxima, _SIZE, gate)
    assert [(h.source, h.target, h.same_pointer) for h in ledger.entries] == [("cupy", "numba.cuda", True)] * 4
    assert [h.nbytes for h in ledger.entries] == [envelope.nbytes, threshold.nbytes, maxima.nbytes, gate.nbytes]
