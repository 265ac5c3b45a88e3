"""Mains hum (50 or 60 Hz) in a recording: how much of the noise measures' high-frequency content
it makes, where.

Hum is a narrow line at the mains frequency. It comes and goes in an ambulatory recording (a
patient beside mains-powered equipment, an electrode whose contact worsens), and the Ricker
response that finds the beats does not pass it, so hum as large as recordings show hides no beat.
The noise measures (:mod:`pipeline.episodes`, :mod:`pipeline.quality`) read high-frequency content
through a second difference whose gain peaks near 50 Hz, where muscle noise lies; read that way,
hum a tenth the size of a small QRS complex passed for noise that hides beats (MIT-BIH 122 read on
V1: half the recording a noise episode, every beat there low quality, every beat found). The
measures take the hum's share out: :func:`hum_power` measures it along the recording and
:meth:`Hum.at` reads it at given samples.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from pipeline import _hum_kernels, backend

MAINS_HZ = (50.0, 60.0)


class Hum(NamedTuple):
    """The hum's power in windows spread evenly over a recording (see :func:`hum_power`)."""

    power: Any       # (windows,) float32 on the recording's device: the hum's mean square in each
    stride: int      # samples from one window's start to the next's
    width: int       # samples a window

    def at(self, samples):
        """The hum's power at ``samples`` (int array on the device of :attr:`power`): the larger of
        the two windows whose centres bracket each sample (hum that rises between them is taken out
        from where it starts)."""
        xp = backend.xp_of(self.power)
        last = self.power.shape[0] - 1
        if last < 0:
            return xp.zeros(samples.shape, dtype=xp.float32)
        place = (samples - self.width / 2) / max(self.stride, 1)
        before = xp.clip(xp.floor(place), 0, last).astype(xp.int64)
        after = xp.clip(before + 1, 0, last)
        return xp.maximum(self.power[before], self.power[after])


def difference_step(fs: float) -> int:
    """The step of the noise measures' second difference ``x[i-step] - 2 x[i] + x[i+step]``: its
    gain peaks at fs / (2 step), near 50 Hz, where muscle noise lies."""
    return max(1, int(round(fs / 100.0)))


def hum_power(signal, fs: float, *, every_s: float = 10.0, least: int = 64, window_s: float = 2.0,
              line_hz: float = 1.0, floor_hz: tuple[float, float] = (3.0, 8.0)) -> Hum:
    """The mean square that mains hum adds to the noise measures' second difference of ``signal``
    (step :func:`difference_step`), along the recording: a :class:`Hum` on the signal's device,
    made without waiting for it. A segmentation measures it once for both measures
    (:func:`pipeline.segmentation.segment`).

    Measured in windows of ``window_s``, one every ``every_s`` (at least ``least`` where the
    recording holds them), spread evenly: each window's second difference is tapered (Hann) and
    projected on the DFT's frequencies within ``line_hz`` of 50 and 60 Hz (the line, drift and
    leakage included) and ``floor_hz`` away on both sides (the level of the spectrum around it:
    muscle noise and QRS complexes spread over many frequencies, hum does not). A line's power is
    that above the level around it, nothing where it is below. Lines the sampling rate cannot show
    are left out; a recording shorter than a window has none. Two kernels do it
    (:mod:`pipeline._hum_kernels`): one thread a window and frequency, then one a window.
    """
    xp = backend.xp_of(signal)
    step = difference_step(fs)
    n, width = int(signal.shape[0]), int(round(window_s * fs))
    lines = [f for f in MAINS_HZ if f + line_hz + fs / width < fs / 2]
    if n < width or width <= 4 * step or not lines:
        return Hum(xp.zeros(0, dtype=xp.float32), 1, width)
    count = min(max(least, int(n / (every_s * fs))), n // width)
    stride = (n - width) // max(count - 1, 1)
    m = width - 2 * step
    spacing = fs / m                                         # the DFT's bins: orthogonal over the window
    reach, near, far = round(line_hz / spacing), round(floor_hz[0] / spacing), round(floor_hz[1] / spacing)
    tops = [min(far, int(np.ceil((fs / 2 - line) / spacing)) - 1) for line in lines]   # below Nyquist
    cycles = [line / fs for line in lines]
    per_line = 2 * reach + 1 + 2 * (far - near + 1)
    powers = xp.empty((count, len(lines) * per_line), dtype=xp.float64)
    line_args = (cycles[0], tops[0], cycles[-1], tops[-1])   # the second the first again where one line fits
    _hum_kernels.launch("hum_bins", powers.size, signal, stride, step, m, len(lines), reach, near, far,
                        *line_args, powers)
    power = xp.empty(count, dtype=xp.float32)
    _hum_kernels.launch("hum_lines", count, powers, len(lines), reach, near, far, m, power)
    return Hum(power, stride, width)
