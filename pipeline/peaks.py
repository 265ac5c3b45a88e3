"""Heartbeat fiducials from the Ricker response: adaptive threshold + 1-D non-maximum suppression,
then beat lengths as differences of the gate positions.

See Also
--------
pipeline.wavelet.ricker_response : the previous step.
pipeline.embed.embed_beats : the next step.
"""
from __future__ import annotations

import numpy as np

from pipeline import _beat_kernels, _kernels, _likeness_kernels, _rhythm_kernels, backend, qrs


# Samples a chunk of the suppression's window (see nms_gate): a wave's peak reads ~2 × 7 samples at
# its window's ends and a window's whole chunks by their maxima.
_NMS_CHUNK = 8


def envelope(response):
    """Polarity-free strength of the response: a downward QRS (some leads, many PVCs) counts too."""
    return backend.xp_of(response).abs(response)


def adaptive_threshold(env, fs: float, relative: float, block_s: float, n_blocks: int):
    """Per-block threshold: ``relative`` × the median of the block maxima around each block.

    The median over several seconds follows slow amplitude changes (electrode contact, posture)
    but ignores a single huge beat or a short noise burst. Returns (thresholds, block length).
    """
    level, block = block_levels(env, fs, block_s, n_blocks)
    return (relative * level).astype(env.dtype), block


def block_levels(env, fs: float, block_s: float, n_blocks: int):
    """The level :func:`adaptive_threshold` takes a fraction of: for each block of ``block_s``,
    the median of the maxima of ``env`` over the ``n_blocks`` blocks around it. Returns (levels,
    block length)."""
    xp = backend.xp_of(env)
    block = max(1, int(round(block_s * fs)))
    n = env.shape[0]
    count = -(-n // block)
    padded = xp.zeros(count * block, dtype=env.dtype)
    padded[:n] = env
    maxima = padded.reshape(count, block).max(axis=1)
    return backend.running_median(maxima, n_blocks // 2), block


def above_the_noise_floor(env, thresholds, block: int, times: float):
    """Each block's threshold raised, where noise fills the block, to ``times`` × the mean of the
    envelope below it (Numba kernel, one thread a block). Between clean beats the response is near
    zero, so the threshold stays; electrode motion or muscle noise lifts the response everywhere,
    and a deflection must stand out of that floor as a QRS complex stands out of its baseline (a
    relative threshold alone, a fraction of the beats' own response, passes the larger swings)."""
    raised = backend.xp_of(env).empty_like(thresholds)
    _kernels.launch("noise_floor", thresholds.shape[0], env, thresholds, int(block), float(times), raised)
    return raised


def nms_gate(env, thresholds, block: int, half_window: int):
    """Binary gate (uint8): 1 at samples above their block's threshold that are the maximum of
    ``env`` within ±``half_window`` samples. Numba kernels, CUDA or CPU by the input's type: the
    maxima of chunks of ``_NMS_CHUNK`` samples, then the gate, which reads a window's whole chunks
    by their maxima."""
    xp = backend.xp_of(env)
    n = env.shape[0]
    maxima = xp.empty(-(-n // _NMS_CHUNK), dtype=env.dtype)
    _kernels.launch("chunk_maxima", maxima.shape[0], env, _NMS_CHUNK, maxima)
    gate = xp.empty(n, dtype=xp.uint8)
    _kernels.launch("nms", n, env, thresholds, block, half_window, maxima, _NMS_CHUNK, gate)
    return gate


def fiducials(response, fs: float, *, refractory_s: float = 0.25, threshold: float = 0.25,
              level_block_s: float = 2.0, level_blocks: int = 9):
    """Sample indices (int64, increasing) of the heartbeats' fiducial points.

    Parameters
    ----------
    response : CuPy or NumPy array
        Ricker response of the ECG (:func:`pipeline.wavelet.ricker_response`).
    refractory_s : float
        Two beats are never closer than this; the NMS half-window.
    threshold, level_block_s, level_blocks
        See :func:`adaptive_threshold`.
    """
    xp = backend.xp_of(response)
    env = envelope(response)
    thresholds, block = adaptive_threshold(env, fs, threshold, level_block_s, level_blocks)
    gate = nms_gate(env, thresholds, block, max(1, int(round(refractory_s * fs))))
    return xp.flatnonzero(gate).astype(xp.int64)


def drop_non_qrs(signal, positions, fs: float, *, window_s: float = 0.38, width_ratio: float = 2.0,
                 slope_ratio: float = 0.8, window_rr_fraction: float = 0.6, max_width_s: float = 0.15,
                 despike_s: float = 0.006, flat_slope_ratio: float = 0.35, step_slope_ratio: float = 0.5,
                 early_beat_height: float = 1.0, early_beat_gap_rr: float = 1.5):
    """Remove candidates that are T waves or baseline steps rather than QRS complexes.

    A tall T wave (slow rhythms, some leads) can pass the threshold and the NMS, which only asks
    for the largest response within ±250 ms. A candidate is taken for a T wave when it follows the
    previous candidate by less than ``window_s`` (T waves peak 250–400 ms after the R wave) and
    less than ``window_rr_fraction`` × the interval before that one (at 150 bpm a premature beat
    0.27 s after a sinus beat is no T wave: that T wave lies inside the refractory period), and
    its deflection is either more than ``width_ratio`` × as wide and less than ``slope_ratio`` ×
    as steep as the previous one's (the second-stage check of Pan & Tompkins, 1985, with the width
    added so that a tall, wide ventricular beat soon after a narrow one is kept), or, whatever its
    width, less than ``flat_slope_ratio`` × as steep (a T wave as narrow as its QRS at half height
    still rises several times more slowly). A candidate whose deflection stays beyond half its
    height for more than ``max_width_s`` is a step of the baseline (electrode motion), unless it
    rises at least ``step_slope_ratio`` × as steeply as the recording's median candidate (over
    ~1000 candidates spread over it, :func:`pipeline.qrs.spread`): a wide ventricular beat (bundle
    branch block, some PVCs) is as wide as a step but far steeper.
    A candidate that is a T wave by width and slope alone is still a beat when its deflection
    (against the ECG 150 ms on both sides) is at least ``early_beat_height`` × the previous one's
    and dropping it would leave a gap over ``early_beat_gap_rr`` × the median RR of the others:
    an early ventricular beat, and the pause after it (a T wave is seldom the taller, and never
    leaves a pause behind).
    One thread a candidate (``non_qrs`` kernel) judges it against the one before, on its shape
    (one QRS-shape launch) and the candidates' median slope on the device, and a second pass
    (``early_beats``) looks for early beats only where a candidate is wide and slow: the host waits
    for the device for one flag, for the kept positions, and, where a candidate is wide and slow,
    for the other candidates' median RR. Returns the kept positions.
    """
    xp = backend.xp_of(positions)
    count = positions.shape[0]
    if count == 0:
        return positions
    _, width, slope = qrs.qrs_shape(signal, positions, fs, despike_s=despike_s, width_cap_s=max_width_s)
    medians = xp.empty(2, dtype=xp.float64)          # the candidates' median width and slope
    sample = [xp.ascontiguousarray(qrs.spread(values)) for values in (width, slope)]
    _beat_kernels.launch("shape_medians", 2 * sample[0].shape[0], *sample, medians)
    (before_first, before_last), (after_first, after_last) = ((int(round(v * fs)) for v in window)
                                                              for window in ((-0.3, -0.2), (0.4, 0.5)))
    keep, slow, any_slow = xp.empty(count, dtype=xp.bool_), xp.empty(count, dtype=xp.uint8), xp.zeros(1, xp.uint8)
    _rhythm_kernels.launch("non_qrs", count, signal, positions, width, slope, medians, max_width_s * fs,
                           np.float32(step_slope_ratio), before_first, before_last, after_first, after_last,
                           int(round(0.1 * fs)), window_s * fs, float(window_rr_fraction), float(width_ratio),
                           np.float32(slope_ratio), np.float32(flat_slope_ratio), keep, slow, any_slow)
    if backend.to_host(any_slow)[0]:                # host sync: one flag
        # The median RR of the candidates that are not wide and slow (over ~1000 of their
        # intervals): a gather and one host copy (two syncs), where some are.
        others = positions[slow == 0]
        rr = float(qrs.sample_median(qrs.spread(xp.diff(others)))) if others.shape[0] > 1 else float("inf")
        _rhythm_kernels.launch("early_beats", count, signal, positions, slow, max(1, int(round(0.15 * fs))),
                               np.float32(early_beat_height), early_beat_gap_rr * rr, keep)
    return positions[keep]


def find_beats(response, signal, fs: float, cfg):
    """The fiducials of the heartbeats in ``signal`` from its Ricker ``response``: the adaptive
    threshold with non-maximum suppression (:func:`fiducials`), each point moved to the QRS
    extremum, T waves and baseline steps removed, the QRS complexes those waves hid from the
    suppression rescued (:func:`rescue_suppressed`; the T-wave check then runs again, as a T wave
    whose QRS was hidden was judged against the beat before), a beat on its own T wave moved to
    its QRS (:func:`off_own_t_waves`), a rival deflection preferred where it keeps the rhythm
    (:func:`keep_the_rhythm`), then a second look for small beats (:func:`second_look`) and a
    search inside long RR gaps (:func:`search_back`); none within ``cfg.refine_s`` of the
    recording's ends (:func:`inside_the_ends`). ``cfg`` is a :class:`pipeline.config.SignalConfig`."""
    xp = backend.xp_of(response)
    env = envelope(response)
    level, block = block_levels(env, fs, cfg.level_block_s, cfg.level_blocks)
    thresholds = above_the_noise_floor(env, (cfg.threshold * level).astype(env.dtype), block, cfg.noise_floor)
    candidates = xp.flatnonzero(nms_gate(env, thresholds, block, max(1, int(round(cfg.refractory_s * fs)))))
    candidates = candidates.astype(xp.int64)
    # Up to ~1000 of them snapped to their largest deflection first, to learn the beats' usual
    # polarity, then all of them preferring it: where R and S are near equal (a wide complex, a low
    # sampling rate that blunts the R) the fiducial stays on the same wave in every beat.
    polarity = qrs.polarity_of(signal, _refine(signal, qrs.spread(candidates), fs, cfg), fs, cfg.polarity_share,
                               search_s=cfg.refine_s, rival=cfg.refine_rival)
    refined = _refine(signal, candidates, fs, cfg, polarity)
    positions = _drop_non_qrs(signal, refined, fs, cfg)
    kept = positions.shape[0]
    positions = rescue_suppressed(env, thresholds, block, signal, candidates, refined, positions, fs, cfg, polarity)
    if positions.shape[0] > kept:
        positions = _drop_non_qrs(signal, positions, fs, cfg)
    positions = off_own_t_waves(env, thresholds, block, signal, positions, fs, cfg, polarity)
    positions = keep_the_rhythm(env, thresholds, block, signal, positions, fs, cfg, polarity)
    positions = second_look(env, level, block, signal, positions, fs, cfg, polarity)
    positions = search_back(env, signal, positions, fs, cfg, polarity)
    return inside_the_ends(positions, signal.shape[0], int(round(cfg.refine_s * fs)))


def _drop_non_qrs(signal, positions, fs: float, cfg):
    """:func:`drop_non_qrs` with ``cfg``'s settings."""
    return drop_non_qrs(signal, positions, fs, window_s=cfg.twave_window_s, width_ratio=cfg.twave_width_ratio,
                        slope_ratio=cfg.twave_slope_ratio, window_rr_fraction=cfg.twave_rr_fraction,
                        max_width_s=cfg.max_qrs_width_s, despike_s=cfg.despike_s,
                        flat_slope_ratio=cfg.twave_flat_slope_ratio, step_slope_ratio=cfg.step_slope_ratio,
                        early_beat_height=cfg.early_beat_height, early_beat_gap_rr=cfg.early_beat_gap_rr)


def inside_the_ends(positions, n: int, margin: int):
    """The sorted fiducials ``positions`` at least ``margin`` samples from both ends of a
    recording of ``n`` samples (the run's: the refinement's reach, ``cfg.refine_s``, half a QRS
    complex). Nearer an end, the deflection a fiducial snapped to may be the recording's edge:
    the Ricker response sees a step there, from the baseline to the zeros beyond it, and a QRS
    complex cut in half cannot be measured or embedded (annotators leave such beats out). The host
    waits for one pair of numbers: how many fiducials lie before each end's margin."""
    xp = backend.xp_of(positions)
    if positions.shape[0] == 0:
        return positions
    first, stop = (int(count) for count in backend.to_host(
        xp.stack([xp.count_nonzero(positions < margin), xp.count_nonzero(positions < n - margin)])))
    return positions[first:stop]


def _refine(signal, positions, fs: float, cfg, polarity: float = 0.0):
    """:func:`refine_to_extremum` with ``cfg``'s settings."""
    return qrs.refine_to_extremum(signal, positions, fs, search_s=cfg.refine_s, despike_s=cfg.despike_s,
                                  polarity=polarity, rival=cfg.refine_rival)


def rescue_suppressed(env, thresholds, block: int, signal, candidates, refined, positions, fs: float, cfg,
                      polarity: float = 0.0):
    """Add the QRS complexes that a wave which did not become a beat hid from the non-maximum
    suppression.

    The suppression keeps the largest response within ±``cfg.refractory_s``. A ventricular beat's
    tall T wave (150–250 ms after it), or the broad response of a ventricular beat that follows
    close behind, can outgrow a real QRS complex 300–450 ms after the beat before: the wave takes
    the suppression, is itself no beat (it is left out or taken for a T wave), and the QRS is lost
    with it. Here the envelope's peaks above the threshold that no beat's own peak suppressed (none
    at least as large within ±``cfg.refractory_s``), and that were no candidate themselves, are
    looked at again: each moved to its QRS extremum, it passes when it lies between two beats, at
    least ``cfg.second_look_gap_s`` after the one before (past its T wave) and ``cfg.refractory_s``
    before the next; when its deflection is as narrow as a QRS complex (at most
    ``cfg.search_back_width`` × the beats' median width) and at least ``cfg.second_look_slope`` ×
    as steep as their median; and when its ECG within ±``cfg.rescue_likeness_s`` correlates at
    least ``cfg.rescue_likeness`` with that of one of the recording's beats (up to ~1000 of them,
    :func:`pipeline.qrs.spread`): a T wave, a baseline swing or noise seldom does. The
    suppression then runs again among the peaks that pass, so that a wave that is no QRS complex
    cannot hide one a second time, and its winners become beats.

    ``candidates`` are the suppression's winners, ``refined`` the same moved to their extrema,
    ``positions`` those of them kept as beats (:func:`drop_non_qrs`). One kernel pass over the
    envelope for its peaks (``unsuppressed``), then one thread a peak for its checks and one a
    (peak, beat) pair for their likeness (:func:`_hidden_beats`), and one thread a peak for the
    second suppression: the host waits for the device twice, for the peaks' count and for the
    rescued beats' (three times where one is rescued).
    Returns the positions with the rescued beats, sorted.
    """
    xp = backend.xp_of(positions)
    count, n = positions.shape[0], env.shape[0]
    if count < 3 or n < 3:
        return positions
    half = max(1, int(round(cfg.refractory_s * fs)))
    own = xp.empty(candidates.shape[0], dtype=xp.int64)     # the beats' own peaks (others stand in)
    _beat_kernels.launch("own_peaks", candidates.shape[0], candidates, refined, positions, half, own)
    unsuppressed = xp.empty(n, dtype=xp.uint8)
    _kernels.launch("unsuppressed", n, env, thresholds, block, own, candidates, half, unsuppressed)
    peak = xp.flatnonzero(unsuppressed)
    if peak.shape[0] == 0:                          # host sync: one number (the mask's count)
        return positions
    moved, passed = _hidden_beats(signal, positions, peak, half, fs, cfg, polarity)
    won = xp.empty(peak.shape[0], dtype=xp.bool_)
    _beat_kernels.launch("suppress_among", peak.shape[0], env, peak, passed, half, won)
    rescued = moved[won]
    if rescued.shape[0] == 0:                       # host sync: the mask's count; most recordings stop here
        return positions
    return xp.unique(xp.concatenate([positions, rescued]))


def _hidden_beats(signal, positions, peak, half: int, fs: float, cfg, polarity: float):
    """(moved, passed): the envelope's peaks ``peak`` moved to their QRS extrema, and whether each
    passes :func:`rescue_suppressed`'s checks (the ``rescue`` kernel, one thread a peak, each check
    only where those before it pass; then the ``alike`` kernel, one thread a peak and a beat, for
    the likeness of the peaks that passed the others). The beats' median width and slope and the
    stretches of their ECG the likeness compares with come from ~1000 of them
    (:func:`pipeline.qrs.spread`), and stay on the device."""
    xp = backend.xp_of(positions)
    count = peak.shape[0]
    sample, medians, reach, stretches = qrs.detector_likeness_sample(signal, qrs.spread(positions), fs, cfg)
    moved, spare = xp.empty(count, dtype=xp.int64), xp.empty(count, dtype=xp.int64)
    width, slope = xp.empty(count, dtype=xp.int32), xp.empty(count, dtype=xp.float32)
    own, state = xp.empty((count, 2), dtype=xp.float64), xp.empty(count, dtype=xp.int32)
    _beat_kernels.launch("rescue", count, signal, positions, peak, *_shape_settings(fs, cfg), float(polarity),
                         float(cfg.refine_rival), float(cfg.second_look_gap_s * fs), half, medians,
                         float(cfg.search_back_width), np.float32(cfg.second_look_slope), reach, moved, width, slope,
                         spare, own, state)
    _likeness_kernels.launch("alike", count * sample.shape[0], signal, moved, own, sample, stretches, reach,
                             np.float32(cfg.rescue_likeness), state)
    return moved, state == _likeness_kernels.RESCUED


def off_own_t_waves(env, thresholds, block: int, signal, positions, fs: float, cfg, polarity: float = 0.0):
    """Move a beat marked on a T wave to the QRS complex whose T wave it is.

    A small, wide ventricular beat's tall T wave can outgrow, in the Ricker response, the QRS
    150–250 ms before it: the suppression keeps the T wave, and :func:`drop_non_qrs` cannot tell,
    the QRS it follows being no candidate. A beat is such a T wave when it is wider than a QRS
    complex (``cfg.search_back_width`` × the beats' median width) and slow (under
    ``cfg.step_slope_ratio`` × their median slope, as :func:`drop_non_qrs` tells a slow wave from a
    wide ventricular beat), and the largest response ``cfg.rival_min_s``–``cfg.refractory_s``
    before it passes the threshold and, moved to its extremum, is steeper than the beat and no
    wider (within a heartbeat the QRS is the narrowest and steepest wave; widths are whole
    samples, so one sample more counts as no wider) and more than ``cfg.refractory_s`` after the
    beat before. One thread a beat (``own_t_wave`` kernel) searches and judges; shapes are
    measured only where the checks before pass, the beats' medians over ~1000 of them
    (:func:`pipeline.qrs.spread`) on the device: no host synchronisation. Returns the positions,
    still sorted (a beat moves between the beat before and its T wave).
    """
    xp = backend.xp_of(positions)
    count = positions.shape[0]
    if count < 3:
        return positions
    near, far = max(1, int(round(cfg.rival_min_s * fs))), max(1, int(round(cfg.refractory_s * fs)))
    medians = _beat_medians(signal, positions, fs, cfg)
    rival, moved, spare, out, width, moved_width, slope, moved_slope = _rival_outputs(xp, count)
    _beat_kernels.launch("own_t_wave", count, env, thresholds, block, signal, positions, near, far,
                         *_shape_settings(fs, cfg), float(polarity), float(cfg.refine_rival), medians,
                         float(cfg.search_back_width), np.float32(cfg.step_slope_ratio), rival, moved, width, slope,
                         moved_width, moved_slope, spare, out)
    return out


def _beat_medians(signal, positions, fs: float, cfg):
    """The beats' median width and slope on the device (:func:`pipeline.qrs.shape_medians` of ~1000
    of them, :func:`pipeline.qrs.spread`), as the per-beat kernels read them."""
    xp = backend.xp_of(positions)
    return qrs.shape_medians(signal, xp.ascontiguousarray(qrs.spread(positions)), fs, despike_s=cfg.despike_s,
                             width_cap_s=cfg.max_qrs_width_s)


def _rival_outputs(xp, count: int) -> tuple:
    """The per-beat outputs the ``rhythm`` and ``own_t_wave`` kernels write: rival, moved, spare and
    out (int64), width and moved width (int32), slope and moved slope (float32)."""
    return (*(xp.empty(count, dtype=xp.int64) for _ in range(4)), *(xp.empty(count, dtype=xp.int32) for _ in range(2)),
            *(xp.empty(count, dtype=xp.float32) for _ in range(2)))


def _shape_settings(fs: float, cfg) -> tuple:
    """The QRS-shape settings of the kernels that refine and measure inside their checks (six
    integers, :func:`pipeline.qrs.shape_settings`): the search of :func:`_refine`, the measures of
    :func:`pipeline.qrs.qrs_shape` with the settings' width cap (a refinement's own width and
    slope are not used)."""
    return qrs.shape_settings(fs, search_s=cfg.refine_s, despike_s=cfg.despike_s, width_cap_s=cfg.max_qrs_width_s)


def keep_the_rhythm(env, thresholds, block: int, signal, positions, fs: float, cfg, polarity: float = 0.0):
    """Move a beat to the largest other deflection within its refractory period when that one
    keeps the rhythm and looks as much like a QRS complex.

    The non-maximum suppression keeps the largest response within ±``cfg.refractory_s``; a tall,
    sharp P wave (or the wide wave of a ventricular beat after its sharp onset) can outgrow the
    QRS complex beside it, and the beat is then marked on the wrong wave: 0.2 s early, an RR
    interval short and the next one long. The rival is the largest response between
    ``cfg.rival_min_s`` and ``cfg.refractory_s`` on either side that passes the threshold; it
    takes the beat's place when it brings the RR intervals before and after closer to the local
    rhythm (the median of the nine RR intervals around) by ``cfg.rival_gain`` × that RR, its
    deflection is at least ``cfg.rival_slope`` × as steep as the beat's, and it is as narrow as a
    QRS complex (at most ``cfg.search_back_width`` × the beats' median width). Two beats in a row
    on the wrong wave keep each other's error (the RR between them looks right): they are judged
    together, over the three RR intervals around them. One thread a beat (``rhythm`` kernel)
    searches and judges its rival, and measures shapes only where the rival keeps the rhythm, the
    beats' median width over ~1000 of them (:func:`pipeline.qrs.spread`) on the device: the host
    waits for the device once, for one flag (and in the sort where a beat's rival keeps the rhythm).
    Returns the positions, sorted.
    """
    xp = backend.xp_of(positions)
    count = positions.shape[0]
    if count < 3:
        return positions
    near, far = max(1, int(round(cfg.rival_min_s * fs))), max(1, int(round(cfg.refractory_s * fs)))
    medians = _beat_medians(signal, positions, fs, cfg)
    rival, moved, spare, out, width, moved_width, slope, moved_slope = _rival_outputs(xp, count)
    better, any_better = xp.empty(count, dtype=xp.bool_), xp.zeros(1, dtype=xp.uint8)
    _rhythm_kernels.launch("rhythm", count, env, thresholds, block, positions, _local_rr(positions), near, far,
                           float(cfg.rival_gain), signal, *_shape_settings(fs, cfg), float(polarity),
                           float(cfg.refine_rival), medians, float(cfg.search_back_width), np.float32(cfg.rival_slope),
                           rival, better, moved, width, slope, moved_width, moved_slope, spare, out, any_better)
    if not backend.to_host(any_better)[0]:          # host sync: one flag
        return positions
    return xp.unique(out)


def _local_rr(positions):
    """The local rhythm: for each RR interval of ``positions``, the median of the nine around it."""
    xp = backend.xp_of(positions)
    return backend.running_median(xp.diff(positions).astype(xp.float64), 4)


def second_look(env, level, block: int, signal, positions, fs: float, cfg, polarity: float = 0.0):
    """Add the small beats the threshold missed: candidates above ``cfg.second_look_threshold`` ×
    the threshold (on the envelope ``env`` and its :func:`block_levels` ``level``), at least
    ``cfg.second_look_gap_s`` from every beat found (past any T wave's peak), kept when their
    deflection is as narrow as a QRS complex (at most 1.5 × the beats' median width) and at least
    ``cfg.second_look_slope`` × as steep as the beats' median (both medians over ~1000 beats
    spread over the recording, :func:`pipeline.qrs.spread`, as the other steps take them). In
    bigeminy the median block maximum is a large ventricular beat's, and a small normal beat
    between two of them stays under a quarter of it; Pan & Tompkins' search-back looks again
    with half the threshold for the same reason. One thread a candidate (``second_look`` kernel)
    refines and judges it, measuring its shape only where the gap passes: the host waits for the
    device twice, for the candidates' count and for the added beats' (three times where one is
    added)."""
    xp = backend.xp_of(positions)
    if positions.shape[0] < 3:
        return positions
    lower = (cfg.threshold * cfg.second_look_threshold * level).astype(env.dtype, copy=False)
    gate = nms_gate(env, lower, block, max(1, int(round(cfg.refractory_s * fs))))
    extra = xp.flatnonzero(gate).astype(xp.int64, copy=False)
    count = extra.shape[0]                          # host sync: one number (the gate's count)
    medians = _beat_medians(signal, positions, fs, cfg)
    moved, spare = xp.empty(count, dtype=xp.int64), xp.empty(count, dtype=xp.int64)
    width, slope = xp.empty(count, dtype=xp.int32), xp.empty(count, dtype=xp.float32)
    keep = xp.empty(count, dtype=xp.bool_)
    _beat_kernels.launch("second_look", count, signal, positions, extra, *_shape_settings(fs, cfg), float(polarity),
                         float(cfg.refine_rival), float(cfg.second_look_gap_s * fs), medians, 1.5,
                         np.float32(cfg.second_look_slope), moved, width, slope, spare, keep)
    added = moved[keep]
    if added.shape[0] == 0:                         # host sync: the mask's count; most recordings stop here
        return positions
    return xp.unique(xp.concatenate([positions, added]))


def search_back(env, signal, positions, fs: float, cfg, polarity: float = 0.0):
    """Look again inside the RR gaps longer than ``cfg.search_back_rr`` × the local RR (the median
    of the nine intervals around), with a level set by the gap itself.

    After a large artefact (an amplifier driven to its rail, the slow recovery of an electrode's
    baseline) the QRS complexes can come back at a tenth of their size for seconds: far under a
    threshold set by the beats around, yet far above the gap's own noise. Pan & Tompkins search
    back after an RR interval 1.66 × the average with half the threshold; here the level inside
    the gap is ``cfg.search_back_level`` × the median of its 50-ms maxima of the response, so that
    noise, a flat line or the slow recovery itself never reach it and a beat ten times smaller
    than its neighbours still does. The search keeps ``max(cfg.second_look_gap_s, RR / 2)`` away
    from the beats at both ends (their T waves), skips gaps longer than ``cfg.search_back_max_s``
    (a pause or a lost lead is not a run of missed beats), suppresses within the absolute
    refractory period (``cfg.search_back_refractory_s``, in 50-ms blocks: the wide response of a
    baseline step in the gap must not hide a beat beside it), and keeps only candidates as narrow
    as a QRS complex (at most ``cfg.search_back_width`` × the beats' median width: a P or T wave,
    or a baseline step, is wider). ``env`` is the response's :func:`envelope`. Only the long
    gaps' samples are read (one thread a gap: ``gap_bounds`` finds the long gaps' whole blocks, one
    thread an interval), then one thread a candidate (``narrow``) refines and measures it against
    the beats' median width on the device; nothing runs without a long gap."""
    xp = backend.xp_of(positions)
    count = positions.shape[0]
    if count < 3:
        return positions
    block = max(1, int(round(0.05 * fs)))           # about a QRS complex: its maxima sample the noise
    first, stop = xp.empty(count - 1, dtype=xp.int64), xp.empty(count - 1, dtype=xp.int64)
    flag = xp.empty(count - 1, dtype=xp.uint8)
    _rhythm_kernels.launch("gap_bounds", count - 1, positions, _local_rr(positions), float(cfg.search_back_rr),
                           cfg.search_back_max_s * fs, cfg.second_look_gap_s * fs, block, env.shape[0] // block,
                           first, stop, flag)
    long = xp.flatnonzero(flag)
    if long.shape[0] == 0:                          # host sync: one number
        return positions
    reach = max(1, int(round(cfg.search_back_refractory_s * fs / block)))
    extra = _gap_peaks(env, first[long], stop[long], block, reach, cfg.search_back_level)
    count = extra.shape[0]
    if count == 0:
        return positions
    medians = _beat_medians(signal, positions, fs, cfg)
    moved, spare = xp.empty(count, dtype=xp.int64), xp.empty(count, dtype=xp.int64)
    width, slope = xp.empty(count, dtype=xp.int32), xp.empty(count, dtype=xp.float32)
    narrow = xp.empty(count, dtype=xp.bool_)
    _rhythm_kernels.launch("narrow", count, signal, xp.sort(extra).astype(xp.int64), *_shape_settings(fs, cfg),
                           float(polarity), float(cfg.refine_rival), medians, float(cfg.search_back_width), moved,
                           width, slope, spare, narrow)
    return xp.unique(xp.concatenate([positions, moved[narrow]]))


def _gap_peaks(env, first, stop, block: int, reach: int, level: float):
    """Sample indices of the candidates inside gaps of blocks ``first[g]`` to ``stop[g] - 1`` of
    the envelope ``env``: the maximum of each block that exceeds ``level`` × the median block
    maximum of its gap and every block within ``reach`` before it (inside the gap or not), and is
    not exceeded by one within ``reach`` after it. One thread a gap (``gap_peaks`` kernel), whatever
    the gaps' lengths; the blocks' maxima and their samples go to one buffer, each gap's blocks
    from ``reach`` before it to ``reach`` after it in a row."""
    xp = backend.xp_of(first)
    lengths = stop - first + 2 * reach
    ends = xp.cumsum(lengths)
    total = int(ends[-1])                           # host sync: one number
    maxima = xp.empty(total, dtype=env.dtype)
    where = xp.empty(total, dtype=xp.int64)
    peak = xp.empty(total, dtype=xp.uint8)
    _kernels.launch("gap_peaks", first.shape[0], env, first, stop, ends - lengths, block, reach,
                    np.float32(level), maxima, where, peak)
    return where[peak.astype(bool)]


def beat_lengths(positions):
    """Samples between consecutive fiducials (``xp.diff``)."""
    return backend.xp_of(positions).diff(positions)


def length_histogram(lengths, fs: float, bin_s: float = 0.02, max_s: float = 2.5):
    """Histogram of beat lengths in seconds: (counts, bin edges), on the input's device."""
    xp = backend.xp_of(lengths)
    edges = xp.arange(0.0, max_s + bin_s, bin_s)
    counts, edges = xp.histogram(lengths / fs, bins=edges)
    return counts, edges
