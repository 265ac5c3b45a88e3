"""The segmentation chain, once: Ricker response → heartbeats (fiducials, flutter and noise
episodes, pauses) → beat lengths → fixed-length rows and each beat's quality. The run
(:mod:`pipeline.run`) times each part as a stage; the warm-up (:mod:`pipeline.warmup`) runs the
same chain untimed. The steps' modules (Numba kernels) are imported where used, so that a cached
start imports none of them.

See Also
--------
pipeline.wavelet, pipeline.peaks, pipeline.episodes, pipeline.rhythm, pipeline.quality, pipeline.embed :
    the steps it chains, from the signal :func:`pipeline.load.load_ecg` reads to the rows
    :func:`pipeline.train.fit_vae` learns from.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable

from pipeline import backend
from pipeline.config import SignalConfig


@dataclass
class Segmented:
    """One recording's beats, found and embedded: the segmentation stages' output, on the
    signal's device."""

    positions: Any      # the beats' fiducials (samples)
    from_other_lead: int  # how many of them only another lead showed (pipeline.other_lead)
    episodes: Any       # episodes.Episodes: flutter and noise stretches
    pauses: Any         # (n, 2): the (start, end) fiducials of each RR interval of cfg.pause_s or more
    histogram: tuple    # the beat lengths' (counts, edges in s)
    beats: Any          # embed.Beats: the rows, each beat's fiducial and length, the rows' scale
    quality: Any        # each beat's quality (low: noise or artefact)
    width: int          # a row's samples
    pre: int            # the fiducial's column in a row


def _untimed(stage: str, host: bool = False):
    return contextlib.nullcontext()


def segment(signal, fs: float, cfg: SignalConfig, stages: Callable = _untimed, other=None, lost_s=None) -> Segmented:
    """The segmentation chain: Ricker response → heartbeats (fiducials, episodes, pauses) → beat
    lengths → fixed-length rows and each beat's quality. The run times each part as a stage
    (``stages``); the warm-up runs the same chain untimed. ``other``: another lead of the
    recording, sample for sample, whose beats fill the pauses the analysed lead cannot show and on
    which the beats' quality reads whether each is as steep there as its neighbours. ``lost_s``:
    (start, end) seconds where the signal is lost (:attr:`pipeline.load.Recording.lost_s`)."""
    from pipeline import embed, mains, peaks, wavelet

    with stages("wavelet"):
        response = wavelet.ricker_response(signal, fs, cfg.ricker_width_s)
    with stages("peaks"):
        hum = mains.hum_power(signal, fs)       # once, for the noise episodes and the beats' quality
        positions, found, pauses, from_other_lead = heartbeats(response, signal, fs, cfg, other, hum, lost_s=lost_s)
    del response
    with stages("lengths"):
        histogram = peaks.length_histogram(peaks.beat_lengths(positions), fs)
    with stages("embed"):
        width = cfg.window(fs)
        beats = embed.embed_beats(signal, positions, fs, width=width, pre_fiducial=cfg.pre_fiducial)
        beat_quality = quality_of_beats(signal, positions, found, fs, hum, other, cfg)
    return Segmented(positions, from_other_lead, found, pauses, histogram, beats, beat_quality, width,
                     int(round(cfg.pre_fiducial * width)))


def heartbeats(response, signal, fs: float, cfg: SignalConfig, other=None, hum=None, *, add_other_beats: bool = True,
               lost_s=None):
    """The heartbeats of ``signal`` from its Ricker ``response``: (fiducials, episodes, pauses, how
    many fiducials came from the ``other`` lead). The pauses of the analysed lead are read on the
    other lead, if there is one (``cfg.other_lead``), before flutter is looked for; flutter that
    lead contradicts is noise (:func:`pipeline.other_lead.vet_flutter`), and so is a pause it shows
    beats in but could not fill (:func:`pipeline.other_lead.unreadable`). Flutter waves are no
    heartbeats, so the fiducials inside flutter episodes are taken out; beats in noise are kept
    (their quality says so) where they look like the recording's beats or fit its rhythm
    (:func:`pipeline.noise_beats.keep_plausible`, which judges the same way faint beats anywhere and
    beats much less steep than one beside them on every lead read): a real beat hidden because noise
    surrounds it would be a missed beat; where that rule takes out deflection after deflection, the
    stretch is noise too (:func:`pipeline.noise_beats.left_out_noise`). Then the beats found on the
    other lead (read the same way, this lead beside it) that this lead shows but missed are added
    (:func:`pipeline.other_lead.add_missed`; not with ``add_other_beats`` False). Pauses are the
    intervals of at least ``cfg.pause_s`` between the beats kept. Where the signal is lost
    (``lost_s``, (start, end) seconds: gaps the loader bridged) is noise: a pause there is in
    doubt. ``hum``: the recording's mains hum for the noise measures
    (:func:`pipeline.mains.hum_power`; measured if None)."""
    from pipeline import episodes, noise_beats, other_lead, peaks, rhythm, wavelet

    other = other if cfg.other_lead else None
    positions = peaks.find_beats(response, signal, fs, cfg)
    positions, added, doubtful = other_lead.fill_gaps(positions, other, fs, cfg)
    found = other_lead.vet_flutter(episodes.find_episodes(signal, fs, positions, hum=hum), other, fs, cfg)
    found = other_lead.unreadable(found, doubtful, fs, cfg)
    if lost_s is not None and len(lost_s):
        found = found.with_lost_signal(lost_s[:, 0], lost_s[:, 1])
    positions, left_out = noise_beats.keep_plausible(signal, positions, found, added, fs, cfg, other)
    found = noise_beats.left_out_noise(left_out, found, fs, cfg)
    if len(found.select("flutter")):  # the fiducials kept are a copy whose length the host waits for
        positions = positions[~episodes.in_episodes(positions, found, fs, "flutter")]
        if added.shape[0]:
            added = added[~backend.to_host(episodes.in_episodes(backend.xp_of(positions).asarray(added), found, fs,
                                                                  "flutter"))]
    missed = 0
    if other is not None and add_other_beats:
        theirs = heartbeats(wavelet.ricker_response(other, fs, cfg.ricker_width_s), other, fs, cfg, signal,
                            add_other_beats=False)[0]
        positions, from_other = other_lead.add_missed(positions, signal, theirs, found, fs, cfg)
        missed = int(from_other.shape[0])
    return positions, found, rhythm.pauses(positions, fs, cfg.pause_s), int(added.shape[0]) + missed


def quality_of_beats(signal, positions, found, fs: float, hum=None, other=None, cfg: SignalConfig = SignalConfig()):
    """Each beat's quality (:func:`pipeline.quality.beat_quality`, ``hum`` the recording's mains
    hum, ``other`` another lead it reads too if ``cfg.other_lead``, its slopes read as the
    detector reads them), below the low-quality line for every beat inside a noise episode,
    whatever its own measures say."""
    from pipeline import episodes, quality

    return quality.beat_quality(signal, positions, fs, hum=hum, other=other if cfg.other_lead else None,
                                slope_options={"despike_s": cfg.despike_s, "width_cap_s": cfg.max_qrs_width_s},
                                noise_spans=episodes.episode_spans(found, episodes.UNREADABLE,
                                                                    backend.xp_of(positions)))
