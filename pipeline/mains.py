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

from pipeline import backend

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
    are left out; a recording shorter than a window has none.
    """
    xp = backend.xp_of(signal)
    step = difference_step(fs)
    n, width = int(signal.shape[0]), int(round(window_s * fs))
    lines = [f for f in MAINS_HZ if f + line_hz + fs / width < fs / 2]
    if n < width or width <= 4 * step or not lines:
        return Hum(xp.zeros(0, dtype=xp.float32), 1, width)
    count = min(max(least, int(n / (every_s * fs))), n // width)
    stride = (n - width) // max(count - 1, 1)
    pieces = signal[xp.arange(count)[:, None] * stride + xp.arange(width)[None, :]].astype(xp.float64)
    second = pieces[:, :-2 * step] - 2.0 * pieces[:, step:-step] + pieces[:, 2 * step:]
    m = second.shape[1]
    second = (second - second.mean(axis=1, keepdims=True)) * xp.hanning(m)
    spacing = fs / m                                         # the DFT's bins: orthogonal over the window
    total = xp.zeros(count, dtype=xp.float64)
    for line in lines:
        reach, near, far = round(line_hz / spacing), round(floor_hz[0] / spacing), round(floor_hz[1] / spacing)
        below_nyquist = int(np.ceil((fs / 2 - line) / spacing)) - 1
        offsets = xp.concatenate([xp.arange(-reach, reach + 1), xp.arange(-far, -near + 1),
                                  xp.arange(near, min(far, below_nyquist) + 1)])
        power = _power(second, (line + offsets * spacing) / fs, xp)
        lobe = 2 * reach + 1
        above = power[:, :lobe].sum(axis=1) - lobe * power[:, lobe:].mean(axis=1)
        # A sine's mean square is (16 / 3) |X|² / m² summed over Hann's main lobe (Parseval, one
        # side: the taper keeps 3/8 of the power).
        total += xp.maximum(above, 0.0) * (16.0 / 3.0 / m ** 2)
    return Hum(total.astype(xp.float32), stride, width)


def _power(rows, cycles_per_sample, xp):
    """|DFT|² of each row of ``rows`` at ``cycles_per_sample`` (an array on their device): (rows,
    frequencies). The basis is made on the device: no copy there, so no wait."""
    phase = 2.0 * np.pi * xp.arange(rows.shape[1], dtype=xp.float64)[:, None] * cycles_per_sample[None, :]
    return (rows @ xp.cos(phase)) ** 2 + (rows @ xp.sin(phase)) ** 2
