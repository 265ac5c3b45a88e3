"""Parameters of a run, as frozen dataclasses. They are saved in every report and checkpoint,
and their hash (with the input's) names the cached run directory."""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class SignalConfig:
    """How beats are found and cut out. Durations are in seconds so they scale with the sampling rate."""

    default_fs: float = 250.0        # used when the file carries no sampling rate and --fs is not given
    ricker_width_s: float = 0.025    # Ricker scale a (zero crossings at ±a): matched to the QRS complex
    refractory_s: float = 0.25       # no two beats closer than this (NMS half-window)
    threshold: float = 0.25          # a beat's response must exceed this fraction of the local level...
    level_block_s: float = 2.0       # ...the local level being the median of block maxima of this length
    level_blocks: int = 9            # ...over this many neighbouring blocks
    noise_floor: float = 3.0         # ...and at least this many times the block's mean response below it (noise)
    refine_s: float = 0.05           # fiducials snap to the ECG's largest deflection within ±this (none nearer the ends)...
    refine_rival: float = 1.5        # ...where one against the beats' usual polarity must be this many times larger...
    polarity_share: float = 0.8      # ...the usual polarity being that of at least this share of the beats
    despike_s: float = 0.006         # ...measured after a running median over ±this (pacing spikes vanish)
    twave_window_s: float = 0.38     # a candidate this soon after the previous one is a T wave when it is...
    twave_width_ratio: float = 2.0   # ...more than this many times as wide...
    twave_slope_ratio: float = 0.8   # ...and less than this fraction as steep as the previous deflection
    twave_rr_fraction: float = 0.6   # (the window shrinks to this fraction of the RR before, for fast rhythms)
    twave_flat_slope_ratio: float = 0.35  # ...or, whatever its width, less than this fraction as steep
    early_beat_height: float = 1.0   # a T-wave-like candidate at least this many times as tall as the beat before...
    early_beat_gap_rr: float = 1.5   # ...whose removal leaves a gap over this × the median RR is an early beat
    max_qrs_width_s: float = 0.15    # a deflection wider than this at half height is a baseline step...
    step_slope_ratio: float = 0.5    # ...unless it is at least this fraction as steep as the median candidate (a wide PVC)
    rival_min_s: float = 0.1         # a beat moves to another deflection this far off (within the refractory period)...
    rival_gain: float = 0.25         # ...that brings its RR intervals this fraction of an RR nearer the local rhythm...
    rival_slope: float = 0.8         # ...and is at least this fraction as steep (and narrow: search_back_width)
    second_look_threshold: float = 0.6   # a second look for small beats, at this fraction of the threshold...
    second_look_gap_s: float = 0.3   # ...at least this far from every beat found...
    second_look_slope: float = 0.35  # ...and at least this fraction as steep as the beats' median
    rescue_likeness: float = 0.9     # a peak a non-beat wave suppressed is a beat when its ECG correlates this well...
    rescue_likeness_s: float = 0.06  # ...over ±this around its fiducial with one of the recording's beats (and is QRS-shaped)
    search_back_rr: float = 1.5      # inside an RR gap this many times the local RR, a search at its own level...
    search_back_level: float = 5.0   # ...this many times the median of its 50-ms response maxima...
    search_back_max_s: float = 10.0  # ...in gaps up to this long (a longer one is a pause or a lost lead)...
    search_back_width: float = 1.5   # ...for candidates at most this many times the beats' median width
    search_back_refractory_s: float = 0.2  # ...one candidate within ± this (the absolute refractory period)
    noise_rhythm_rr: float = 1.25    # in noise, a beat unlike the recording's goes where its neighbours are then at most
                                     # this × the local RR apart and the rhythm fits better without it
    faint_slope: float = 0.3         # anywhere, a beat less than this fraction as steep as the median is judged as in noise...
    faint_neighbour_slope: float = 0.5  # ...and so is one less than this fraction as steep as a beat beside it, on every lead
    absent_other_slope: float = 0.2  # ...and one less than this fraction as steep as the median on the other lead (not there)
    absent_other_twave_s: float = 0.45  # such a beat this soon after the beat before, the other lead showing the beats
                                     # either side, is that beat's T wave: it goes whatever the rhythm
    noise_left_out: int = 4          # where the rhythm takes out at least this many deflections...
    noise_left_out_s: float = 20.0   # ...each within this of the next, the stretch is a noise episode
    pause_s: float = 2.0             # an RR interval at least this long is listed as a pause
    other_lead: bool = True          # read the pauses of the analysed lead on another lead, where there is one...
    other_lead_max_s: float = 20.0   # ...pauses up to this long...
    other_lead_context_s: float = 3.0  # ...filled when over this long on both sides...
    other_lead_agree_s: float = 0.1  # ...the two leads' beats match one to one within this...
    other_lead_min_rr: float = 0.5   # ...and no interval of the filled gap is under this × the local RR
    other_lead_steep: float = 1.0    # a beat only the other lead finds is added where the analysed lead is this
                                     # × as steep as its smaller beats (10th percentile) or more...
    other_lead_apart_s: float = 0.25  # ...and none of its own beats is within this
    flutter_other_rr_s: float = 0.45  # flutter the other lead shows as beats this far apart (median RR)...
    flutter_other_cv: float = 0.35   # ...in a rhythm this steady (RR standard deviation / mean) is noise
    window_s: float = 1.024          # embedding row length: 256 samples at 250 Hz
    pre_fiducial: float = 0.25       # fraction of the row before the fiducial point (P wave, QRS onset)
    max_gap_s: float = 1.0           # non-finite runs are interpolated; longer ones than this are signal lost

    def window(self, fs: float) -> int:
        """Embedding width in samples: ``window_s`` at ``fs``, a multiple of 8 (the VAE halves it 3 times)."""
        return max(8, int(round(self.window_s * fs / 8)) * 8)


@dataclass(frozen=True)
class VAEConfig:
    """The convolutional VAE and its training."""

    latent_dim: int = 2              # the dashboard plots the latent plane
    channels: tuple[int, ...] = (8, 16, 32)
    hidden: int = 64
    epochs: int = 30                 # at most; training stops earlier once the loss levels off (below)
    # Rows per step (an epoch's last batch holds the rest). 2048: on the 20M default (70,102
    # training beats) 4096 rows at the scaled rate below reached AUROC 0.987 in 30 epochs, 2048
    # rows 0.994 in 17 (CPU, benchmarks.train_speed).
    batch_size: int = 2048
    min_steps_per_epoch: int = 16    # ...but smaller batches when there are few beats, so short records still train
    # Adam's step size for batches up to ``lr_reference_batch`` rows; a larger batch averages away
    # gradient noise, so its rate grows with sqrt(batch / reference) (4096 rows: 5.7e-3).
    learning_rate: float = 4e-3
    lr_reference_batch: int = 2048
    # Convergence stop: end training when the best epoch loss of the last ``patience`` epochs is
    # not ``tolerance`` (relative) below the best one before them, but never before ``min_steps``
    # optimiser steps: a VAE's loss can rest on a plateau for several epochs before the latent
    # code opens up and it falls again. Short records (~16 steps an epoch) thus train all
    # ``epochs``; the 20M default (35 steps an epoch) may stop after 15. tolerance = 0: no stop.
    tolerance: float = 0.01
    patience: int = 3
    min_steps: int = 500
    # Weight of the KL term against the summed squared error: 2σ² for a Gaussian likelihood with
    # σ ≈ 0.07 of the median beat amplitude. At 1.0 the posterior collapses (z ≈ 0 for every beat).
    beta: float = 0.01
    train_fraction: float = 0.75
    seed: int = 0
    grid: int = 3                    # decoded samples: grid × grid points over the latent plane
    # bf16 autocast on the GPU (ignored on the CPU). Off by default: this small model's steps are
    # bound by kernel launches, which autocast's casts add to, so it makes them slower, not faster.
    mixed_precision: bool = False
    # On the GPU, capture the training step once as a CUDA graph and replay it (ignored on the
    # CPU): one launch per step instead of ~100 kernel launches from Python.
    cuda_graph: bool = True


def config_hash(*parts) -> str:
    """Stable short hash of dataclasses / dicts / strings, for cache keys."""
    payload = [asdict(p) if hasattr(p, "__dataclass_fields__") else p for p in parts]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
