"""Outlier scores and latent positions of every beat; decoded samples over the latent plane; the
combination of the VAE's shape score with the rhythm score, and a beat's score in words.

See Also
--------
pipeline.train.fit_vae : the previous step.
pipeline.rhythm.describe_rhythm : the rhythm score combined here.
pipeline.results.write_run : the next step.
"""
from __future__ import annotations

import math

import torch

from pipeline import backend
from pipeline.model import VAE, negative_elbo


@torch.no_grad()
def score_beats(model: VAE, rows: torch.Tensor, batch_size: int = 16384) -> tuple[torch.Tensor, torch.Tensor]:
    """Outlier score (negative ELBO at the posterior mean) and latent mean z of each row.

    Returns ``(score (n,), z (n, latent_dim))`` as float32 tensors on ``rows``' device.
    """
    scores, latents = [], []
    for chunk in rows.split(batch_size):
        mu, logvar = model.encode(chunk)
        recon = model.decode(mu)
        scores.append(negative_elbo(chunk, recon, mu, logvar, model.cfg.beta))
        latents.append(mu)
    if not scores:
        empty = rows.new_zeros((0,))
        return empty, rows.new_zeros((0, model.cfg.latent_dim))
    return torch.cat(scores).float(), torch.cat(latents).float()


@torch.no_grad()
def decode(model: VAE, z: torch.Tensor) -> torch.Tensor:
    """Decoder output for latent points ``z`` (n, latent_dim) → (n, width)."""
    return model.decode(z.to(next(model.parameters()).device, torch.float32)).float()


@torch.no_grad()
def latent_grid(z: torch.Tensor, size: int = 3, coverage: float = 0.9) -> torch.Tensor:
    """``size`` × ``size`` points spanning the central ``coverage`` of the beats' latent positions
    (row-major, z2 descending so that it reads like the scatter plot)."""
    lo, hi = (1 - coverage) / 2, 1 - (1 - coverage) / 2
    q = torch.quantile(z[:, :2].float().cpu(), torch.tensor([lo, hi]), dim=0)
    z1 = torch.linspace(float(q[0, 0]), float(q[1, 0]), size)
    z2 = torch.linspace(float(q[1, 1]), float(q[0, 1]), size)
    g2, g1 = torch.meshgrid(z2, z1, indexing="ij")
    return torch.stack([g1.reshape(-1), g2.reshape(-1)], dim=1)


# --------------------------------------------------------------------------- shape + rhythm
def tail_probability(values):
    """Right-tail probability of each value within its own recording: the fraction of beats that
    score at least as high (1/n for the highest, 1 for the lowest). Distribution-free, so a VAE
    loss and a rhythm z-score land on one scale. Array in, same array type out (float64)."""
    xp = backend.xp_of(values)
    n = values.shape[0]
    if n == 0:
        return values.astype(xp.float64)
    ordered = xp.sort(values)
    at_least = n - xp.searchsorted(ordered, values, side="left")
    return at_least.astype(xp.float64) / n


def combine_scores(shape, rhythm):
    """Outlier score from the shape (VAE) and rhythm scores of the same beats.

    Each score becomes its right-tail probability within the recording (:func:`tail_probability`);
    the two are combined by Fisher's method, ``X = -2 (ln p_shape + ln p_rhythm)``, which under
    independence follows a chi-squared law with 4 degrees of freedom; the score is
    ``-log10`` of that combined probability, ``P(χ²₄ ≥ X) = e^(-X/2) (1 + X/2)``. A beat that is
    extreme in either respect ranks high, one extreme in both ranks highest, and the number reads
    as "as unusual as 1 beat in 10^score of this recording". Returns (score, p_shape, p_rhythm).
    """
    xp = backend.xp_of(shape)
    p_shape, p_rhythm = tail_probability(shape), tail_probability(rhythm)
    half_x = -(xp.log(p_shape) + xp.log(p_rhythm))  # X / 2
    log_p = -half_x + xp.log1p(half_x)
    return (-log_p / math.log(10.0)).astype(xp.float32), p_shape.astype(xp.float32), p_rhythm.astype(xp.float32)


def explain(row) -> str:
    """Why a beat ranks where it does, in words, from its beats-table row (a mapping or a pandas
    row with ``p_shape``, ``rr_pre``, ``rr_post`` and ``score_rhythm``).

    >>> explain({"p_shape": 0.4, "rr_pre": 0.72, "rr_post": 1.31, "score_rhythm": 9.0})
    'premature by 28 %, long pause after it (1.31 × the local RR); shape typical'
    """
    reasons = []
    rr_pre, rr_post = float(row["rr_pre"]), float(row["rr_post"])
    rhythm_notable = float(row["score_rhythm"]) >= RHYTHM_NOTABLE_Z
    if rhythm_notable and math.isfinite(rr_pre) and rr_pre <= 1 - EARLY:
        reasons.append(f"premature by {round(100 * (1 - rr_pre))} %")
    if rhythm_notable and math.isfinite(rr_post) and rr_post >= 1 + PAUSE:
        reasons.append(f"long pause after it ({rr_post:.2f} × the local RR)")
    if math.isfinite(rr_pre) and rr_pre >= 1 + LATE and not reasons:
        reasons.append(f"comes after a pause ({rr_pre:.2f} × the local RR)")
    p_shape = float(row["p_shape"])
    if p_shape <= SHAPE_RARE:
        shape = f"shape unlike the recording's beats (rarer than 1 in {_one_in(p_shape)})"
    elif p_shape <= SHAPE_UNUSUAL:
        shape = f"shape unusual (1 in {_one_in(p_shape)})"
    else:
        shape = "shape typical"
    if not reasons:
        return shape + ("; timing regular" if p_shape <= SHAPE_UNUSUAL else ", timing regular")
    return ", ".join(reasons) + "; " + shape


# explain(): when a component is worth a word
RHYTHM_NOTABLE_Z = 3.0   # rhythm score (robust z) from which timing is mentioned
EARLY = 0.08             # "premature" from 8 % early...
PAUSE = 0.12             # ..."long pause" from 12 % longer than the local RR...
LATE = 0.3               # ..."after a pause" from 30 % late
SHAPE_RARE = 0.01        # shape tail probability: rarer than 1 beat in 100
SHAPE_UNUSUAL = 0.05     # 1 in 20


def _one_in(p: float) -> str:
    count = 1.0 / max(p, 1e-9)
    return f"{count:,.0f}" if count < 1e4 else f"{count:.0e}"
