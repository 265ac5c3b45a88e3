"""Tests of pipeline.wavelet: the Ricker wavelet against its closed form, the response against
SciPy's FFT convolution."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.signal import fftconvolve

from pipeline import backend
from pipeline.wavelet import ricker, ricker_response


def mexican_hat(t: np.ndarray, a: float) -> np.ndarray:
    """Negative second derivative of a Gaussian, scaled to unit energy: the textbook Ricker wavelet."""
    gaussian = np.exp(-t ** 2 / (2 * a ** 2))
    second_derivative = (t ** 2 / a ** 4 - 1 / a ** 2) * gaussian
    unit_energy = math.sqrt(4 * a ** 3 / (3 * math.sqrt(math.pi)))  # ∫ψ² dt = 1
    return -second_derivative * unit_energy


@pytest.mark.parametrize("points, a", [(101, 4.0), (100, 4.0), (63, 6.25), (1, 1.0), (257, 25.0)])
def test_ricker_matches_closed_form(points, a, xp):
    wavelet = ricker(points, a, xp)
    assert isinstance(wavelet, xp.ndarray) and wavelet.dtype == xp.float32 and wavelet.shape == (points,)
    t = np.arange(points) - (points - 1) / 2
    np.testing.assert_allclose(backend.to_host(wavelet), mexican_hat(t, a), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("a", [2.5, 6.25, 12.5])
def test_ricker_shape(a):
    points = int(2 * math.ceil(8 * a) + 1)  # wide enough that the tails are negligible
    w = ricker(points, a).astype(np.float64)
    centre = (points - 1) // 2
    np.testing.assert_array_equal(w, w[::-1])                         # symmetric
    assert np.argmax(w) == centre                                     # peak at the centre
    assert abs(w.sum()) < 1e-4 * np.abs(w).sum()                      # zero mean (no DC response)
    assert np.sum(w ** 2) == pytest.approx(1.0, rel=1e-3)             # unit energy
    zero = centre + a                                                 # zero crossings at ±a
    if float(a).is_integer():
        assert abs(w[int(zero)]) < 1e-6
    else:
        assert w[int(math.floor(zero))] > 0 > w[int(math.ceil(zero))]


@pytest.mark.parametrize("points, a", [(0, 1.0), (11, 0.0), (11, -2.0)])
def test_ricker_rejects_bad_arguments(points, a):
    with pytest.raises(ValueError, match=r"ricker needs points >= 1 and a > 0; got points="):
        ricker(points, a)


def _reference_response(x: np.ndarray, fs: float, width_s: float) -> np.ndarray:
    a = width_s * fs
    points = int(2 * math.ceil(5 * a) + 1)
    t = np.arange(points) - (points - 1) / 2
    x = x.astype(np.float64)
    return fftconvolve(x - x.mean(), mexican_hat(t, a), mode="same")


@pytest.mark.parametrize("n", [30, 1000, 1001, 4096, 12_345])
@pytest.mark.parametrize("width_s", [0.01, 0.025, 0.05])
def test_ricker_response_matches_fftconvolve(n, width_s, xp):
    fs = 250.0
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 0.5 + 3.0 + np.sin(np.arange(n) / 40)).astype(np.float32)  # offset, wander
    response = ricker_response(xp.asarray(x), fs, width_s)
    assert isinstance(response, xp.ndarray) and response.dtype == xp.float32 and response.shape == (n,)
    assert response.flags.c_contiguous
    reference = _reference_response(x, fs, width_s)
    np.testing.assert_allclose(backend.to_host(response), reference, rtol=0, atol=1e-4 * np.abs(reference).max())


def test_ricker_response_peaks_at_a_spike(xp):
    """A lone spike answers with the wavelet itself, centred on the spike: no shift."""
    x = np.zeros(2000, np.float32)
    x[777] = 1.0
    response = backend.to_host(ricker_response(xp.asarray(x), 250.0, 0.025))
    assert int(np.argmax(response)) == 777
    np.testing.assert_allclose(response[777 - 3:777 + 4], response[777 + 3:777 - 4:-1], rtol=1e-4, atol=1e-6)


def test_ricker_response_ignores_offset_and_keeps_input(xp):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(5000).astype(np.float32)
    signal = xp.asarray(x + 100.0)
    shifted = ricker_response(signal, 360.0, 0.025)
    plain = ricker_response(xp.asarray(x), 360.0, 0.025)
    np.testing.assert_allclose(backend.to_host(shifted), backend.to_host(plain), atol=2e-3)
    np.testing.assert_array_equal(backend.to_host(signal), x + 100.0)  # the input is not modified


def _across_blocks():
    """Lengths either side of the one-transform limit, a full batch of blocks and one sample more
    (a second batch, almost all zeros), for the default width at 250 Hz."""
    from pipeline.wavelet import BATCH, BLOCK

    points = int(2 * math.ceil(5 * 0.025 * 250.0) + 1)
    hop = BLOCK - (points - 1)
    return [BLOCK - points + 1, BLOCK - points + 2, BATCH * hop, BATCH * hop + 1]


@pytest.mark.parametrize("n", _across_blocks())
def test_a_long_response_in_blocks_matches_fftconvolve(n, xp):
    """Overlap-save blocks (the GPU's way with a long recording, called directly on the CPU) give
    the one-transform response: every block's part aligned, none missing or repeated at the blocks'
    joins (spikes on them answer with the centred wavelet)."""
    from pipeline import wavelet

    fs = 250.0
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 0.5 + 3.0 + np.sin(np.arange(n) / 40)).astype(np.float32)
    x[wavelet.BLOCK - 64 - 1:wavelet.BLOCK - 64 + 2] += 20.0    # the first join, give or take a sample
    signal = xp.asarray(x)
    if xp is np:
        a = 0.025 * fs
        points = int(2 * math.ceil(5 * a) + 1)
        mean = signal.mean(dtype=np.float64).astype(np.float32)
        fft = backend.fft_module(np)
        response = wavelet._in_blocks(signal, mean, points, fft.rfft(wavelet.ricker(points, a), wavelet.BLOCK), np, fft)
    else:
        response = ricker_response(signal, fs, 0.025)
    assert isinstance(response, xp.ndarray) and response.dtype == xp.float32 and response.shape == (n,)
    assert response.flags.c_contiguous
    reference = _reference_response(x, fs, 0.025)
    np.testing.assert_allclose(backend.to_host(response), reference, rtol=0, atol=1e-4 * np.abs(reference).max())


@pytest.mark.gpu
def test_short_signals_of_any_length_share_one_fft_plan():
    """On the GPU, signals shorter than a block, whatever their lengths (a second lead's stretches
    around each recording's pauses), are transformed at one length: after the first, cuFFT makes
    no plan (a plan made inside the run costs milliseconds). Each response is still the linear
    convolution's."""
    cupy = pytest.importorskip("cupy")
    from cupy.fft.config import get_plan_cache

    fs, rng = 360.0, np.random.default_rng(7)
    ricker_response(cupy.zeros(1000, dtype=cupy.float32), fs, 0.025)
    plans = get_plan_cache().get_curr_size()
    for n in (5_003, 17_321, 200_000, 999_000):
        x = rng.standard_normal(n).astype(np.float32)
        response = ricker_response(cupy.asarray(x), fs, 0.025)
        reference = _reference_response(x, fs, 0.025)
        np.testing.assert_allclose(cupy.asnumpy(response), reference, rtol=0, atol=1e-4 * np.abs(reference).max())
    assert get_plan_cache().get_curr_size() == plans
