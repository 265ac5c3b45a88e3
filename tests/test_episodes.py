"""Tests of pipeline.episodes on the synthetic stress cases: the flutter and noise episodes are
found within stated tolerances, none where there is none, the same on NumPy and CuPy."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline import backend, episodes, stress
from pipeline.episodes import Episodes, find_episodes, in_episodes, noise_severity
from pipeline.flutter import flutter_features

# Tolerances. A found episode of the right kind covers at least this share of a true flutter
# episode (the DS1 target for record 207) / of a true noise episode (a burst's first and last
# 0.1 s are tapered in, quieter than the rest).
FLUTTER_COVER = 0.8
NOISE_COVER = 0.5
# Found episodes reach at most this far beyond the true ones (s).
SLACK_S = 1.0


@pytest.fixture(scope="module")
def cases() -> dict:
    return {name: stress.make_case(name) for name in stress.CASES}


def _found(case, xp):
    """Episodes of a case, with the true beats standing in for the fiducials a detector finds."""
    return find_episodes(xp.asarray(case.signal), case.fs, xp.asarray(case.beats))


def _overlap(start, end, episodes: Episodes) -> float:
    return float(np.clip(np.minimum(end, episodes.end_s) - np.maximum(start, episodes.start_s), 0, None).sum())


def _assert_found(case, found: Episodes, kind: str, cover: float):
    truth = [(start, end) for k, start, end in case.episodes if k == kind]
    mine = found.select(kind)
    for start, end in truth:
        share = _overlap(start, end, mine) / (end - start)
        assert share >= cover, f"{case.name}: true {kind} {start:.1f}-{end:.1f} s covered {share:.0%}"
    for start, end in zip(mine.start_s, mine.end_s):
        near = any(start >= a - SLACK_S and end <= b + SLACK_S for a, b in truth)
        assert near, f"{case.name}: {kind} episode {start:.1f}-{end:.1f} s is no true one ({truth})"
    assert ((mine.confidence >= 0) & (mine.confidence <= 1)).all()


# --------------------------------------------------------------------------- stress cases
@pytest.mark.parametrize("name, kind, cover, absent", [
    *((name, "flutter", FLUTTER_COVER, "noise")   # large fast waves pass the range test, but are flutter
      for name in ("flutter", "pvcs_into_flutter", "flutter_128hz", "flutter_1khz")),
    *((name, "noise", NOISE_COVER, "flutter")
      for name in ("noise_bursts", "noise_bursts_128hz", "noise_bursts_1khz", "electrode_motion",
                   "mains_hum", "mains_hum_60hz_128hz"))])   # hum is no noise episode; the bursts are
def test_episodes_are_found(cases, name, kind, cover, absent, xp):
    case = cases[name]
    found = _found(case, xp)
    _assert_found(case, found, kind, cover)
    if kind == "flutter":
        assert len(found.select("flutter")) == 1
    assert len(found.select(absent)) == 0


def test_ventricular_beats_leading_into_flutter_stay_outside_it(cases, xp):
    """A run of PVCs at 150 /min before the flutter passes the spectral tests but not the sine
    test: the episode starts at the first sine-like window, and the PVCs stay beats."""
    case = cases["pvcs_into_flutter"]
    found = _found(case, xp)
    pvcs = xp.asarray(case.beats[case.symbols == "V"])
    assert pvcs.shape[0] == 6
    assert not backend.to_host(in_episodes(pvcs, found, case.fs, "flutter")).any(), found.to_frame()


@pytest.mark.parametrize("name", ["pauses", "tall_t_slow", "bigeminy", "ventricular_tachycardia",
                                  "supraventricular_tachycardia", "supraventricular_tachycardia_128hz", "av_block",
                                  "av_block_128hz", "atrial_flutter", "atrial_flutter_128hz"])
def test_no_episode_in_clean_cases(cases, name, xp):
    found = _found(cases[name], xp)
    assert len(found) == 0, found.to_frame()


def test_without_fiducials_the_range_stands_in(cases):
    case = cases["noise_bursts"]
    _assert_found(case, find_episodes(case.signal, case.fs), "noise", NOISE_COVER)


@pytest.mark.parametrize("seed", range(4))
def test_fast_ventricular_tachycardia_is_not_flutter(seed):
    """A run of PVCs at 190 /min is as fast, regular and baseline-free as flutter; its complexes
    fail the sine test: harmonics (a high mean frequency), or a second harmonic that outgrows the
    fundamental (a strong subharmonic of the dominant frequency)."""
    case = stress.make_case("ventricular_tachycardia", seed=seed)
    features = flutter_features(case.signal, case.fs)
    centre = features["centre_s"].all()
    run = (centre > 13) & (centre < 21)
    sine = (features["sine_ratio"] <= 1.35) & ((features["subharmonic"] <= 0.35) | (features["dominant_hz"] < 4.4))
    assert sine[run].mean() < 1 / 3
    assert len(find_episodes(case.signal, case.fs, case.beats)) == 0


def test_flat_and_clipped_stretches_are_noise(cases):
    case = cases["pauses"]
    fs = case.fs
    signal = case.signal.copy()
    signal[int(10 * fs):int(13 * fs)] = signal[int(10 * fs)]  # a lead off: one value for 3 s
    low, high = float(signal.min()), float(signal.max())
    burst = slice(int(30 * fs), int(33 * fs))
    signal[burst] = np.clip(8.0 * signal[burst], low, high)  # the amplifier saturates
    found = find_episodes(signal, fs, case.beats).select("noise")
    for start, end in ((10.0, 13.0), (30.0, 33.0)):
        assert _overlap(start, end, found) >= 0.8 * (end - start), found.to_frame()
    assert _overlap(0, case.duration_s, found) <= 3.0 + 3.0 + 2 * 2 * SLACK_S


# --------------------------------------------------------------------------- backends
@pytest.mark.parametrize("name", ["flutter", "noise_bursts", "mains_hum"])
def test_same_on_every_backend(cases, name, xp):
    """CuPy gives NumPy's episodes and measures (float32 sums may differ in the last bits)."""
    case = cases[name]
    reference, found = _found(case, np), _found(case, xp)
    np.testing.assert_array_equal(found.kind, reference.kind)
    np.testing.assert_allclose(found.start_s, reference.start_s, atol=0.11)
    np.testing.assert_allclose(found.end_s, reference.end_s, atol=0.11)
    mine = flutter_features(xp.asarray(case.signal), case.fs)
    theirs = flutter_features(case.signal, case.fs)
    assert isinstance(mine["concentration"], xp.ndarray)
    for key in ("concentration", "off_baseline", "sine_ratio", "subharmonic"):
        np.testing.assert_allclose(backend.to_host(mine[key]), theirs[key], atol=2e-3)
    severity, tick = noise_severity(xp.asarray(case.signal), case.fs, xp.asarray(case.beats))
    assert isinstance(severity, xp.ndarray) and severity.dtype == xp.float32
    np.testing.assert_allclose(backend.to_host(severity), noise_severity(case.signal, case.fs, case.beats)[0],
                               rtol=1e-3, atol=1e-4)


def test_in_episodes_masks_the_fiducials_inside(xp):
    episodes = Episodes(["noise", "flutter", "noise"], [1.0, 5.0, 5.5], [2.0, 8.0, 6.0], [0.9, 0.8, 0.7])
    fs = 100.0
    positions = xp.asarray(np.array([50, 100, 150, 200, 201, 499, 500, 700, 800, 801]))
    inside = in_episodes(positions, episodes, fs)
    assert isinstance(inside, xp.ndarray) and inside.dtype == bool
    np.testing.assert_array_equal(backend.to_host(inside), [0, 1, 1, 1, 0, 0, 1, 1, 1, 0])
    only_noise = backend.to_host(in_episodes(positions, episodes, fs, "noise"))
    np.testing.assert_array_equal(only_noise, [0, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    wider = backend.to_host(in_episodes(positions, episodes, fs, ["noise"], margin_s=0.5))
    np.testing.assert_array_equal(wider, [1, 1, 1, 1, 1, 0, 1, 0, 0, 0])
    assert not backend.to_host(in_episodes(positions, Episodes(), fs)).any()
    with pytest.raises(ValueError, match=r"kinds must be among flutter, noise, lost; got \['beats'\]"):
        in_episodes(positions, episodes, fs, "beats")


# --------------------------------------------------------------------------- the flutter kernels
def _flutter_reference(signal, fs, *, search_hz=(1.5, 10.0), total_hz=(1.0, 20.0), near_hz=1.0) -> dict:
    """The measures of :func:`flutter_features` by the whole-array NumPy formula its kernels
    replaced (2-s windows every 0.5 s, decimated to about 50 Hz), written out on its own."""
    q = max(1, int(round(fs / 50.0)))
    rate = fs / q
    m = signal.shape[0] // q
    length, hop = max(8, int(round(2.0 * rate))), max(1, int(round(0.5 * rate)))
    count = (m - length) // hop + 1
    n_fft = 1 << int(np.ceil(np.log2(2 * length)))
    step = rate / n_fft
    low, high = int(np.ceil(total_hz[0] / step)), int(total_hz[1] / step)
    blocks = signal[: m * q].reshape(m, q)
    decimated = blocks[:, 0].astype(np.float32)
    for j in range(1, q):
        decimated += blocks[:, j]
    decimated /= q
    frames = np.lib.stride_tricks.sliding_window_view(decimated, length)[::hop][:count].copy()
    frames -= frames.mean(axis=1, keepdims=True)
    t = np.arange(length, dtype=np.float32) - (length - 1) / 2.0
    frames -= (frames @ (t / float(length * (length * length - 1) / 12.0)))[:, None] * t
    magnitude = np.abs(frames)
    off_baseline = (magnitude > 0.2 * magnitude.max(axis=1, keepdims=True)).mean(axis=1)
    angle = (2 * np.pi / n_fft) * np.outer(np.arange(length), np.arange(low, high + 1))
    basis = np.hanning(length)[:, None] * np.concatenate([np.cos(angle), np.sin(angle)], axis=1)
    spectrum = frames @ basis.astype(np.float32)
    bins = high - low + 1
    power = spectrum[:, :bins] ** 2 + spectrum[:, bins:] ** 2
    first, last = int(np.ceil(search_hz[0] / step)) - low, int(search_hz[1] / step) - low
    peak = np.argmax(power[:, first:last + 1], axis=1) + first
    freqs = (np.arange(low, high + 1) * step).astype(np.float32)
    tiny = np.finfo(np.float32).tiny
    total = np.maximum(power.sum(axis=1), tiny)

    def around(centre, reach_hz):
        reach = int(round(reach_hz / step))
        index = centre[:, None] + np.arange(-reach, reach + 1)
        inside = (index >= 0) & (index < bins)
        return np.where(inside, np.take_along_axis(power, np.clip(index, 0, bins - 1), axis=1), 0.0).sum(axis=1)

    half = (peak + low) // 2 - low
    return {"dominant_hz": freqs[peak], "concentration": around(peak, near_hz) / total,
            "off_baseline": off_baseline,
            "sine_ratio": np.sqrt((power * freqs * freqs).sum(axis=1) / total) / freqs[peak],
            "subharmonic": around(half, near_hz / 2) / np.maximum(around(peak, near_hz / 2), tiny)}


@pytest.mark.parametrize("fs", [128.0, 250.0, 360.0])
def test_flutter_kernels_match_the_whole_array_formula(fs, xp):
    """Random windows: noise, sines across the search band (the lowest puts half its frequency
    below the spectrum's first bin), an offset, and a flat stretch, whose powers all tie at 0 (the
    dominant bin is then the first, as argmax's, and the ratios 0)."""
    rng = np.random.default_rng(int(fs))
    n = int(120 * fs)
    t = np.arange(n) / fs
    signal = rng.normal(0.0, 0.3, n)
    for k, hz in enumerate((1.6, 3.1, 4.7, 6.5, 9.4)):
        part = slice(int((10 + 20 * k) * fs), int((25 + 20 * k) * fs))
        signal[part] += 2.0 * np.sin(2 * np.pi * hz * t[part])
    signal[int(40 * fs):int(50 * fs)] += 30.0
    signal[int(2 * fs):int(8 * fs)] = 0.0
    signal = signal.astype(np.float32)
    found = flutter_features(xp.asarray(signal), fs)
    expected = _flutter_reference(signal, fs)
    assert (expected["concentration"] == 0).sum() >= 4  # the flat windows
    np.testing.assert_array_equal(backend.to_host(found["dominant_hz"]), expected["dominant_hz"])
    for key in ("concentration", "off_baseline", "sine_ratio", "subharmonic"):
        assert found[key].dtype == np.float32 and isinstance(found[key], xp.ndarray)
        np.testing.assert_allclose(backend.to_host(found[key]), expected[key], rtol=1e-4, atol=1e-6, err_msg=key)


# --------------------------------------------------------------------------- the decision kernels
# Each against the whole-array formula it replaced, written out here.
def _flags_reference(f, flutter_hz=(2.2, 8.0), min_concentration=0.5, min_off_baseline=0.45, max_sine_ratio=1.35,
                     max_subharmonic=0.35) -> np.ndarray:
    dominant = f["dominant_hz"]
    candidate = ((f["concentration"] >= min_concentration) & (f["off_baseline"] >= min_off_baseline)
                 & (dominant >= flutter_hz[0]) & (dominant <= flutter_hz[1]))
    halving = (f["subharmonic"] > max_subharmonic) & (dominant >= 2 * flutter_hz[0])
    sine = candidate & (f["sine_ratio"] <= max_sine_ratio) & ~halving
    return candidate.astype(np.int8) + 2 * sine.astype(np.int8)


def test_flutter_flags_match_the_whole_array_formula(xp):
    """Values on every threshold and one float32 step below it: NumPy compares a float32 array with
    a Python float in float32 (0.45 as float32 is below 0.45)."""
    rng = np.random.default_rng(2)

    def around(*values):
        values = np.float32(values)
        return np.concatenate([values, np.nextafter(values, np.float32(0)), np.float32([np.nan])])

    features = {"dominant_hz": rng.choice(around(1.6, 2.2, 4.4, 8.0, 9.0), 4000),
                **{key: rng.choice(around(0.35, 0.45, 0.5, 1.35), 4000)
                   for key in ("concentration", "off_baseline", "sine_ratio", "subharmonic")}}
    expected = _flags_reference(features)
    assert {0, 1, 3} <= set(expected.tolist())
    runs = episodes._flutter_runs({key: xp.asarray(v) for key, v in features.items()}, 4, flutter_hz=(2.2, 8.0),
                                  min_concentration=0.5, min_off_baseline=0.45, max_sine_ratio=1.35,
                                  max_subharmonic=0.35)
    np.testing.assert_array_equal(backend.to_host(runs.flags), expected)


def _runs_reference(flags: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """First and last index of each run of True, runs less than ``gap`` + 1 apart joined."""
    edges = np.diff(flags.astype(np.int8), prepend=0, append=0)
    changes = np.flatnonzero(edges)
    rising = edges[changes] > 0
    first, last = changes[rising], changes[~rising] - 1
    if first.shape[0] > 1:
        joined = first[1:] - last[:-1] - 1 <= gap
        first, last = first[np.concatenate([[True], ~joined])], last[np.concatenate([~joined, [True]])]
    return first, last


@pytest.mark.parametrize("head", [5, 10_000])
@pytest.mark.parametrize("gap", [0, 1, 4, 30, 150])
def test_run_tables_match_the_whole_array_formula(gap, head, xp, monkeypatch):
    """Random flags over about eighty chunks of the kernel, a run across chunks, runs at both ends
    and gaps bridged across more than a chunk (150); two tables in one buffer, with more runs than
    the first copy holds (``head`` 5) or fewer."""
    monkeypatch.setattr(episodes, "_HEAD_ROWS", head)
    rng = np.random.default_rng(gap)
    n = 5000
    bits, marks = rng.random(n) < (0.3 if gap < 10 else 0.01), rng.random(n) < 0.4
    bits[1000:1400] = bits[:2] = bits[-2:] = True
    marks[1000:1100] = False
    flags = (bits.astype(np.int8) | (2 * (bits & marks)).astype(np.int8))
    prefix = np.cumsum(rng.random(n).astype(np.float32), dtype=np.float64)
    tables = episodes._run_tables([episodes._Runs(xp.asarray(flags), 1, 2, gap, xp.asarray(prefix)),
                                   episodes._Runs(xp.asarray(flags[:700]), 1, 1, gap, xp.empty(0, xp.float64))], xp)
    first, last = _runs_reference(bits, gap)
    assert first.shape[0] > 10
    table = tables[0]
    np.testing.assert_array_equal(table[:, 0], first)
    np.testing.assert_array_equal(table[:, 1], last)
    marked = np.concatenate([[0], np.cumsum(bits & marks)])
    np.testing.assert_array_equal(table[:, 2], marked[first])
    np.testing.assert_array_equal(table[:, 3], marked[last + 1])
    ends = np.concatenate([[0.0], prefix])
    np.testing.assert_array_equal(table[:, 4], ends[first])
    np.testing.assert_array_equal(table[:, 5], ends[last + 1])
    # The first and the last marked index within each run, as the flutter episodes' edges were found.
    mark_first, mark_last = _runs_reference(bits & marks, 0)
    after = np.minimum(np.searchsorted(mark_last, first), mark_first.shape[0] - 1)
    before = np.maximum(np.searchsorted(mark_first, last, side="right") - 1, 0)
    has_first = (mark_last[after] >= first) & (mark_first[after] <= last)
    has_last = (mark_first[before] <= last) & (mark_last[before] >= first)
    np.testing.assert_array_equal(table[:, 6], np.where(has_first, np.maximum(mark_first[after], first), -1))
    np.testing.assert_array_equal(table[:, 7], np.where(has_last, np.minimum(mark_last[before], last), -1))
    first, last = _runs_reference(bits[:700], gap)
    np.testing.assert_array_equal(tables[1][:, [0, 1, 6, 7]], np.stack([first, last, first, last], axis=1))
    np.testing.assert_array_equal(tables[1][:, 4:6], 0.0)


def test_run_tables_of_nothing(xp):
    none = xp.zeros(0, dtype=xp.int8)
    tables = episodes._run_tables([episodes._Runs(none, 1, 1, 3, xp.empty(0, xp.float64)),
                                   episodes._Runs(xp.zeros(10, dtype=xp.int8), 1, 1, 0, xp.zeros(10, xp.float64))], xp)
    assert [t.shape for t in tables] == [(0, 8), (0, 8)]


def _severity_reference(measures, amplitude, tick, half, masked, tick_s, hf_ratio=0.2, range_ratio=4.0,
                        step_ratio=2.5, flat_ratio=0.005, rail_share=0.1):
    amplitude = amplitude if amplitude > 0 else 1.0
    ranges, short_ranges = measures[0], measures[1]
    severity = np.maximum(np.sqrt(measures[2]) / (hf_ratio * amplitude), ranges / (range_ratio * amplitude))
    severity = np.maximum(severity, np.abs(measures[4] - measures[3]) / (step_ratio * amplitude))
    severity = np.maximum(severity, measures[5] / (2 * half * tick * rail_share))
    severity = np.maximum(severity, flat_ratio * amplitude / np.maximum(short_ranges, np.float32(1e-30)))
    centres = (np.arange(severity.shape[0]) + 0.5) * tick_s
    slot = np.searchsorted(masked[0], centres, side="right") - 1
    inside = (slot >= 0) & (centres <= masked[1][np.clip(slot, 0, None)]) if masked.shape[1] else False
    severity = np.where(inside, 0.0, severity)
    flagged = severity >= 1.0
    return severity, flagged, np.where(flagged, np.minimum(severity, 10.0), 0.0)


@pytest.mark.parametrize("name", ["noise_bursts", "electrode_motion", "noise_bursts_128hz"])
def test_tick_severity_matches_the_whole_array_formula(cases, name, xp):
    """The severity, flags and capped severity of every tick, with and without a mask, for the
    typical amplitude measured, a tenth of it, the mean of two, none (a flat recording divides by
    1) and NaN (as none)."""
    case = cases[name]
    ticks = episodes._noise_ticks(xp.asarray(case.signal), case.fs, xp.asarray(case.beats), tick_s=0.1,
                                  hf_ratio=0.2, range_ratio=4.0, step_ratio=2.5, flat_ratio=0.005, rail_share=0.1)
    measures, ranked = backend.to_host(ticks.measures), backend.to_host(ticks.ranked)
    # Three ticks whose rail samples make a severity of exactly 1, the threshold.
    measures[:, :3] = np.float32([[0.0], [1e3], [0.0], [0.0], [0.0], [2 * 5 * ticks.tick * 0.1]])
    ticks = ticks._replace(measures=xp.asarray(measures))
    centre = (np.array([[case.episodes[0][1] / 0.1, 200, 205], [case.episodes[0][1] / 0.1 + 5, 202, 300]]).round()
              + 0.5) * ticks.seconds   # bounds on ticks' centres
    typical = np.median(ranked)
    for values in (ranked, ranked / 10, np.float32([typical / 3, typical * 2]), np.zeros(1, np.float32),
                   np.float32([typical, np.nan, typical])):
        for spans in (np.zeros((2, 0)), centre):
            mine = ticks._replace(ranked=xp.asarray(np.sort(values))).severity(xp.asarray(spans))
            severity, flagged, capped = _severity_reference(measures, float(np.median(values)), ticks.tick, 5, spans,
                                                            ticks.seconds)
            assert (severity[:3] == 1).all() and (values is not ranked or not flagged.all())
            np.testing.assert_array_equal(backend.to_host(mine[0]), severity)
            np.testing.assert_array_equal(backend.to_host(mine[1]), flagged)
            np.testing.assert_array_equal(backend.to_host(mine[2]), capped)


@pytest.mark.parametrize("count", [9000, 4999])
def test_typical_amplitude_matches_the_whole_array_formula(count, xp):
    """Of 9,000 fiducials (every second one measured) or 4,999, some at the recording's ends, the
    peak-to-peaks partitioned around their median; without fiducials, the ranges."""
    rng = np.random.default_rng(4)
    fs, n = 250.0, 2_000_000
    signal = np.cumsum(rng.normal(0, 0.05, n)).astype(np.float32)
    positions = np.sort(rng.choice(np.arange(n), count, replace=False))
    positions[:2], positions[-2:] = [0, 3], [n - 4, n - 1]
    half = int(round(0.05 * fs))
    sample = positions[:: max(1, count // 4096)]
    window = signal[np.clip(sample[:, None] + np.arange(-half, half + 1)[None, :], 0, n - 1)]
    ranges = rng.random(1001).astype(np.float32)
    for where, values in ((positions, window.max(axis=1) - window.min(axis=1)), (None, ranges)):
        found = backend.to_host(episodes._typical_amplitude(xp.asarray(signal), None if where is None else
                                                            xp.asarray(where), fs, xp.asarray(ranges)))
        ordered = np.sort(values)
        np.testing.assert_array_equal(np.sort(found), ordered)
        middle = [(values.shape[0] - 1) // 2, values.shape[0] // 2, -1]
        np.testing.assert_array_equal(found[middle], ordered[middle])


def test_in_episodes_match_the_whole_array_formula(xp):
    """Overlapping and nested episodes of both kinds, fiducials on their bounds, a margin."""
    rng = np.random.default_rng(8)
    fs = 250.0
    start, end = np.sort(rng.integers(0, 600 * 250, 60)), rng.integers(25, 5000, 60)
    found = Episodes(rng.choice(["noise", "flutter"], 60), start / fs, (start + end) / fs, np.ones(60))
    positions = np.unique(np.concatenate([rng.integers(0, 620 * 250, 20_000), start, start + end]))  # on the bounds
    for kinds, margin in (("noise", 0.0), (("noise", "flutter"), 0.3), ("flutter", 1.0)):
        keep = np.isin(found.kind, kinds)
        lo, hi = found.start_s[keep] - margin, found.end_s[keep] + margin
        t = positions / fs
        expected = ((lo[None, :] <= t[:, None]) & (t[:, None] <= hi[None, :])).any(axis=1)
        inside = in_episodes(xp.asarray(positions), found, fs, kinds, margin_s=margin)
        np.testing.assert_array_equal(backend.to_host(inside), expected)


# --------------------------------------------------------------------------- the dataclass and errors
def test_episodes_table():
    episodes = Episodes.concat([Episodes(["noise"], [7.0], [8.0], [0.6]),
                                Episodes(["flutter", "noise"], [1.0, 3.0], [4.0, 3.5], [1.0, 0.9])])
    assert len(episodes) == 3
    np.testing.assert_array_equal(episodes.start_s, [1.0, 3.0, 7.0])
    np.testing.assert_allclose(episodes.duration_s, [3.0, 0.5, 1.0])
    assert episodes.select("noise").kind.tolist() == ["noise", "noise"]
    frame = episodes.to_frame()
    assert list(frame.columns) == ["kind", "start_s", "end_s", "confidence"] and len(frame) == 3
    assert len(Episodes()) == 0 and list(Episodes().to_frame().columns) == list(frame.columns)


def test_episodes_refuses_malformed_fields():
    with pytest.raises(ValueError, match=r"kind must be one of flutter, noise, lost; got \['vf'\]"):
        Episodes(["vf"], [0.0], [1.0], [1.0])
    with pytest.raises(ValueError, match="must be 1-D arrays of one length"):
        Episodes(["noise"], [0.0, 1.0], [1.0], [1.0])
    with pytest.raises(ValueError, match="kind must be one of flutter, noise, lost; got 'beats'"):
        Episodes().select("beats")


def test_find_episodes_refuses_bad_input():
    signal = np.zeros(10_000, dtype=np.float32)
    with pytest.raises(ValueError, match=r"signal must be 1-D \(one lead\); got shape \(2, 5000\)"):
        find_episodes(signal.reshape(2, -1), 250.0)
    with pytest.raises(ValueError, match="fs must be a positive number of Hz; got 0"):
        find_episodes(signal, 0)
    with pytest.raises(ValueError, match="positions must be a 1-D integer array.*dtype float64"):
        find_episodes(signal, 250.0, np.array([1.0, 2.0]))


def test_short_and_flat_recordings():
    assert len(find_episodes(np.zeros(100, dtype=np.float32), 250.0, flutter=True, noise=False)) == 0
    flat = find_episodes(np.zeros(2_500, dtype=np.float32), 250.0)  # 10 s of nothing: a lead off
    assert flat.kind.tolist() == ["noise"] and flat.start_s[0] == 0.0 and flat.end_s[0] == pytest.approx(10.0)


def test_lost_signal_is_its_own_episode_and_leaves_noise_and_flutter_theirs():
    """Where the signal is lost (a bridged gap) a 'lost' episode of confidence 1 stands; a noise
    episode across it keeps its parts outside it (none under 0.3 s: the flat bridge's edges), one
    apart stays, and flutter keeps what it covers."""
    found = Episodes(["noise", "noise", "noise", "flutter"], [29.8, 31.0, 70.0, 95.0], [30.2, 42.0, 72.0, 101.0],
                     [0.7, 0.9, 0.6, 0.8])
    marked = found.with_lost_signal(np.array([30.0, 90.0, 35.0]), np.array([40.0, 100.0, 38.0]))
    assert marked.kind.tolist() == ["lost", "noise", "noise", "lost", "flutter"]
    np.testing.assert_allclose(np.stack([marked.start_s, marked.end_s], axis=1),
                               [[30.0, 40.0], [40.0, 42.0], [70.0, 72.0], [90.0, 95.0], [95.0, 101.0]])
    np.testing.assert_allclose(marked.confidence, [1.0, 0.9, 0.6, 1.0, 0.8])
    assert found.with_lost_signal(np.zeros(0), np.zeros(0)).kind.tolist() == found.kind.tolist()
