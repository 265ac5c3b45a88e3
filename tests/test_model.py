"""Tests of pipeline.model, pipeline.train and pipeline.score: shapes, the loss by hand, training,
the seeded split, scoring, and that injected abnormal beats score as outliers."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.config import SignalConfig, VAEConfig
from pipeline.metrics import auroc
from pipeline.model import VAE, negative_elbo
from pipeline.score import decode, latent_grid, score_beats
from pipeline.train import Adam, batch_lengths, build_step, converged, epoch_batches, fit_vae, plan_training, split_train

ABNORMAL = ("V", "A", "Q")


@pytest.fixture(scope="module")
def synthetic_beats(synthetic_ecg):
    """Embedded beats of the synthetic ECG (pipeline front end, default settings) and the true symbol
    of each (the nearest injected beat within 150 ms, '' when none)."""
    from pipeline import embed, peaks, qrs, wavelet

    cfg, ecg = SignalConfig(), synthetic_ecg
    response = wavelet.ricker_response(ecg.signal, ecg.fs, cfg.ricker_width_s)
    positions = peaks.fiducials(response, ecg.fs, refractory_s=cfg.refractory_s, threshold=cfg.threshold,
                                level_block_s=cfg.level_block_s, level_blocks=cfg.level_blocks)
    positions = qrs.refine_to_extremum(ecg.signal, positions, ecg.fs, search_s=cfg.refine_s)
    beats = embed.embed_beats(ecg.signal, positions, ecg.fs, width=cfg.window(ecg.fs))
    distance = np.abs(beats.fiducial[:, None] - ecg.r_peaks[None, :])
    nearest = distance.argmin(axis=1)
    symbols = np.where(distance.min(axis=1) <= 0.15 * ecg.fs, ecg.symbols[nearest], "")
    return torch.from_numpy(beats.rows), symbols


@pytest.fixture(scope="module")
def trained(synthetic_beats):
    rows, _ = synthetic_beats
    is_train = split_train(len(rows), 0.75, seed=0)
    progress = []
    model, history = fit_vae(rows, is_train, VAEConfig(epochs=8, tolerance=0.0),
                             progress=lambda fraction, message: progress.append((fraction, message)))
    return model, history, is_train, progress


# --------------------------------------------------------------------------- model
@pytest.mark.parametrize("width", [256, 368])
def test_vae_shapes(width):
    torch.manual_seed(0)
    model = VAE(width)
    x = torch.randn(5, width)
    recon, loss = model(x)
    assert recon.shape == (5, width) and recon.dtype == torch.float32
    assert loss.shape == () and torch.isfinite(loss)
    mu, logvar = model.encode(x)
    assert mu.shape == logvar.shape == (5, 2)
    assert model.decode(mu).shape == (5, width)


def test_vae_other_config():
    cfg = VAEConfig(channels=(4, 8), latent_dim=3, hidden=16)
    model = VAE(100, cfg)  # two stride-2 layers: a multiple of 4 suffices
    mu, _ = model.encode(torch.randn(3, 100))
    assert mu.shape == (3, 3) and model.decode(mu).shape == (3, 100)


@pytest.mark.parametrize("width", [100, 250, 7])
def test_vae_rejects_width_not_multiple_of_8(width):
    with pytest.raises(ValueError, match=rf"width must be a multiple of 8 \(3 stride-2 layers\); got {width}"):
        VAE(width)


@pytest.mark.parametrize("beta", [1.0, 0.25])
def test_negative_elbo_by_hand(beta):
    rng = np.random.default_rng(1)
    x, recon = rng.standard_normal((2, 6, 32))
    mu, logvar = rng.standard_normal((2, 6, 2))
    error = ((recon - x) ** 2).sum(axis=1)
    kl = 0.5 * (mu ** 2 + np.exp(logvar) - 1.0 - logvar).sum(axis=1)  # KL(N(mu, σ²) ‖ N(0, 1))
    got = negative_elbo(*(torch.tensor(a, dtype=torch.float32) for a in (x, recon, mu, logvar)), beta)
    np.testing.assert_allclose(got.numpy(), error + beta * kl, rtol=1e-5)
    q = torch.distributions.Normal(torch.tensor(mu), torch.tensor(np.exp(0.5 * logvar)))
    kl_torch = torch.distributions.kl_divergence(q, torch.distributions.Normal(0.0, 1.0)).sum(dim=1)
    np.testing.assert_allclose(kl, kl_torch.numpy(), rtol=1e-6)


def test_forward_loss_is_the_mean_negative_elbo():
    model = VAE(64, VAEConfig(beta=0.5))
    x = torch.randn(10, 64)
    torch.manual_seed(3)
    _, loss = model(x)
    mu, logvar = model.encode(x)
    torch.manual_seed(3)  # the same reparameterisation noise
    recon = model.decode(mu + torch.randn_like(mu) * torch.exp(0.5 * logvar))
    assert loss.item() == pytest.approx(negative_elbo(x, recon, mu, logvar, 0.5).mean().item(), rel=1e-5)


# --------------------------------------------------------------------------- train
def test_split_train_is_seeded_and_disjoint():
    mask = split_train(1000, 0.75, seed=0)
    assert mask.dtype == torch.bool and mask.shape == (1000,) and int(mask.sum()) == 750
    train, test = set(np.flatnonzero(mask.numpy()).tolist()), set(np.flatnonzero(~mask.numpy()).tolist())
    assert not train & test and train | test == set(range(1000))
    assert torch.equal(mask, split_train(1000, 0.75, seed=0))      # same on repeated calls
    assert not torch.equal(mask, split_train(1000, 0.75, seed=1))  # the seed matters
    assert not mask[:750].all()                                    # shuffled, not the first 75 %
    assert int(split_train(7, 0.75, seed=0).sum()) == 5            # round(5.25)
    assert int(split_train(1, 0.75, seed=0).sum()) == 1            # at least one


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.1])
def test_split_train_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match=rf"train_fraction must be between 0 and 1; got {fraction}"):
        split_train(10, fraction, seed=0)


def test_plan_training_batches_and_rates():
    cfg = VAEConfig(batch_size=4096, min_steps_per_epoch=16, learning_rate=4e-3, lr_reference_batch=2048)
    big = plan_training(70_102, cfg)  # the 20M default's training beats
    assert (big.batch, big.steps_per_epoch) == (4096, 18)
    assert big.learning_rate == pytest.approx(4e-3 * 2 ** 0.5)
    short = plan_training(1_400, cfg)  # a short record: at least 16 steps an epoch, the reference rate
    assert (short.batch, short.steps_per_epoch, short.learning_rate) == (87, 17, 4e-3)
    assert plan_training(2, cfg) == plan_training(2, cfg) and plan_training(2, cfg).batch == 2
    assert plan_training(2048 * 16, cfg).learning_rate == 4e-3  # the reference batch itself


@pytest.mark.parametrize("history, expected", [
    ([10, 5, 3, 2, 1.5, 1.2, 1.0, 0.9, 0.85, 0.849, 0.848, 0.847], True),  # levelled off (0.35 %)
    ([10, 5, 3, 2, 1.5, 1.2, 1.0, 0.9, 0.85, 0.80, 0.76, 0.72], False),    # still falling 5 % an epoch
    ([10, 5, 3, 2, 1.5, 1.2, 1.0, 0.9, 0.85, 0.84, 1.9, 0.80], False),     # one bad epoch, then a gain
    ([10, 5, 3, 2, 1.5, 1.2, 1.0, 0.9, 0.85, 1.9, 2.0, 2.1], True),        # worse and worse: no gain
])
def test_converged_compares_the_best_recent_loss_with_the_best_before(history, expected):
    cfg = VAEConfig(tolerance=0.01, patience=3, min_steps=400)
    assert converged(history, cfg, steps_per_epoch=35) is expected
    assert converged(history, cfg, steps_per_epoch=17) is False        # 12 × 17 steps: fewer than 400
    assert converged(history, VAEConfig(tolerance=0.0), 35) is False    # tolerance 0: train every epoch


def test_epoch_batches_visit_every_row_once():
    plan = plan_training(1_000, VAEConfig(batch_size=4096, min_steps_per_epoch=16))  # batch 62, 17 steps
    assert batch_lengths(1_000, plan) == [62] * 16 + [8]
    assert batch_lengths(992, plan_training(992, VAEConfig(min_steps_per_epoch=16))) == [62] * 16  # no remainder
    generator = torch.Generator().manual_seed(0)
    batches = epoch_batches(1_000, plan, generator)
    assert [len(index) for index in batches] == batch_lengths(1_000, plan)
    order = torch.cat(batches)
    assert sorted(order.tolist()) == list(range(1_000)) and order.dtype == torch.int64
    assert torch.equal(order, torch.cat(epoch_batches(1_000, plan, torch.Generator().manual_seed(0))))  # seeded
    assert not torch.equal(order, torch.cat(epoch_batches(1_000, plan, generator)))                     # next epoch


def test_build_step_is_one_adam_step_on_the_indexed_rows():
    """The plain step equals forward + backward + Adam written out by hand on the same rows, with
    the noise drawn from the step's generator."""
    torch.manual_seed(0)
    rows = torch.randn(40, 64)
    cfg = VAEConfig(beta=0.5)
    model, reference = VAE(64, cfg), VAE(64, cfg)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = build_step(model, optimizer, rows, [8], torch.Generator().manual_seed(5))
    assert not step.captured and step.loss_sum.item() == 0.0
    index = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6])
    step(index)
    by_hand = torch.optim.Adam(reference.parameters(), lr=1e-2)
    _, loss = reference(rows[index], torch.randn(8, 2, generator=torch.Generator().manual_seed(5)))
    loss.backward()
    by_hand.step()
    for a, b in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(a, b)
    assert step.loss_sum.item() == pytest.approx(8 * loss.item(), rel=1e-6)  # summed over the batch's rows


def test_adam_makes_torch_optim_adams_updates():
    """Ten steps of the project's Adam and of ``torch.optim.Adam`` from the same weights on the same
    batches and noise: the same weights, moments and step counts."""
    torch.manual_seed(0)
    rows = torch.randn(64, 64)
    model, reference = VAE(64), VAE(64)
    reference.load_state_dict(model.state_dict())
    ours_adam = Adam(model.parameters(), lr=3e-3)
    ours = build_step(model, ours_adam, rows, [16], torch.Generator().manual_seed(2))
    theirs_adam = torch.optim.Adam(reference.parameters(), lr=3e-3)
    theirs = build_step(reference, theirs_adam, rows, [16], torch.Generator().manual_seed(2))
    order = torch.Generator().manual_seed(1)
    for _ in range(10):
        index = torch.randperm(64, generator=order)[:16]
        ours(index)
        theirs(index)
    for ours_p, theirs_p in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours_p, theirs_p, rtol=1e-6, atol=1e-7)
        ours_state, theirs_state = ours_adam.state[ours_p], theirs_adam.state[theirs_p]
        for key in ("step", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(ours_state[key], theirs_state[key], rtol=1e-6, atol=1e-9)
    assert float(ours_adam.state[next(model.parameters())]["step"]) == 10


def test_training_leaves_torch_dynamo_unimported(device):
    """A cold start waits for every import training makes: fitting the VAE (on the GPU: captured
    steps) must not pull in ``torch._dynamo`` and sympy, which ``torch.optim.Adam`` imports at its
    first step. Checked in a fresh process."""
    import subprocess
    import sys

    script = ("import sys, torch; from pipeline.config import VAEConfig; from pipeline.train import fit_vae, split_train;"
              f"rows = torch.randn(600, 64, device={'cuda' if device == 'gpu' else 'cpu'!r});"
              "fit_vae(rows, split_train(600, 0.75, 0), VAEConfig(epochs=2));"
              "print(sorted(m for m in ('torch._dynamo', 'sympy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_cudnn_times_its_algorithms_during_training_only(device):
    """On the GPU cuDNN times each convolution shape of training once (``cudnn.benchmark``); the
    flag is put back afterwards, so scoring's chunks and the decoded grid are not timed again at
    their first pass (~0.4 s of a cold start on the H200). On the CPU training leaves it alone."""
    flags = torch.backends.cudnn
    before = flags.benchmark
    seen = []
    rows = torch.randn(600, 64, device="cuda" if device == "gpu" else "cpu")
    fit_vae(rows, split_train(600, 0.75, 0), VAEConfig(epochs=2), progress=lambda *_: seen.append(flags.benchmark))
    assert seen and all(seen) == (device == "gpu" or before)
    assert flags.benchmark == before


def test_build_step_capture_needs_cuda():
    model = VAE(64)
    with pytest.raises(ValueError, match="a captured training step needs a CUDA device; the rows are on cpu"):
        build_step(model, torch.optim.Adam(model.parameters()), torch.zeros(10, 64), [4, 2], torch.Generator(),
                   capture=True)


def test_fit_vae_stops_once_the_loss_levels_off(synthetic_beats):
    rows = synthetic_beats[0][:600]
    is_train = split_train(len(rows), 0.75, seed=0)
    cfg = VAEConfig(epochs=60, tolerance=0.05, patience=2, min_steps=64)
    steps = plan_training(int(is_train.sum()), cfg).steps_per_epoch
    progress = []
    _, history = fit_vae(rows, is_train, cfg, progress=lambda fraction, message: progress.append((fraction, message)))
    assert 64 <= len(history) * steps and len(history) < 60
    assert converged(history, cfg, steps) and not any(converged(history[:n], cfg, steps) for n in range(1, len(history)))
    assert progress[-1][0] == 1.0 and progress[-1][1].endswith("(converged)")
    assert progress[-1][1].startswith(f"epoch {len(history)}/60, loss ")


def test_fit_vae_loss_decreases(trained):
    model, history, _, progress = trained
    assert len(history) == 8 and np.isfinite(history).all()
    assert history[-1] < 0.7 * history[0], history
    assert not model.training  # handed back in eval mode
    assert [f for f, _ in progress] == pytest.approx([(e + 1) / 8 for e in range(8)])
    assert progress[-1][1].startswith("epoch 8/8, loss ")


def test_fit_vae_is_seeded(synthetic_beats):
    rows = synthetic_beats[0][:400]
    is_train = split_train(len(rows), 0.75, seed=0)
    runs = [fit_vae(rows, is_train, VAEConfig(epochs=2, seed=seed)) for seed in (5, 5, 6)]
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-6)
    for name, value in runs[0][0].state_dict().items():
        torch.testing.assert_close(value, runs[1][0].state_dict()[name])
    assert runs[0][1] != runs[2][1]


def test_fit_vae_rejects_bad_input():
    with pytest.raises(ValueError, match=r"beats must be 2-D \(n_beats, width\); got shape \(64,\)"):
        fit_vae(torch.zeros(64), torch.ones(64, dtype=torch.bool))
    with pytest.raises(ValueError, match="need at least 2 training beats; got 1"):
        fit_vae(torch.zeros(3, 64), torch.tensor([True, False, False]))


# --------------------------------------------------------------------------- score
def test_score_beats_is_the_elbo_at_the_posterior_mean(trained, synthetic_beats):
    model, *_ = trained
    rows = synthetic_beats[0]
    scores, z = score_beats(model, rows)
    assert scores.shape == (len(rows),) and z.shape == (len(rows), 2)
    assert scores.dtype == z.dtype == torch.float32
    with torch.no_grad():
        mu, logvar = model.encode(rows)
        expected = negative_elbo(rows, model.decode(mu), mu, logvar, model.cfg.beta)
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(z, mu)


def test_score_beats_is_deterministic_and_batch_free(trained, synthetic_beats):
    model, *_ = trained
    rows = synthetic_beats[0]
    first, z_first = score_beats(model, rows)
    again, z_again = score_beats(model, rows)
    assert torch.equal(first, again) and torch.equal(z_first, z_again)
    chunked, z_chunked = score_beats(model, rows, batch_size=37)
    torch.testing.assert_close(chunked, first, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(z_chunked, z_first, rtol=1e-5, atol=1e-5)
    empty, z_empty = score_beats(model, rows[:0])
    assert empty.shape == (0,) and z_empty.shape == (0, 2)


def test_latent_grid_spans_the_central_beats():
    z = torch.from_numpy(np.random.default_rng(2).normal([1.0, -3.0], [2.0, 0.5], (5000, 2)).astype(np.float32))
    grid = latent_grid(z, size=3, coverage=0.9)
    assert grid.shape == (9, 2)
    lo, hi = np.quantile(z.numpy(), [0.05, 0.95], axis=0)
    np.testing.assert_allclose(grid[:, 0].numpy(), np.tile(np.linspace(lo[0], hi[0], 3), 3), rtol=1e-4)
    np.testing.assert_allclose(grid[:, 1].numpy(), np.repeat(np.linspace(hi[1], lo[1], 3), 3), rtol=1e-4)
    assert latent_grid(z, size=5).shape == (25, 2)


def test_decode_grid(trained, synthetic_beats):
    model, *_ = trained
    _, z = score_beats(model, synthetic_beats[0])
    rows = decode(model, latent_grid(z, 3).double())
    assert rows.shape == (9, model.width) and rows.dtype == torch.float32 and torch.isfinite(rows).all()
    assert not torch.allclose(rows[0], rows[-1])  # different corners decode to different beats


# --------------------------------------------------------------------------- outliers
def test_abnormal_beats_score_higher(trained, synthetic_beats):
    model, _, is_train, _ = trained
    rows, symbols = synthetic_beats
    scores = score_beats(model, rows)[0].numpy()
    labelled = symbols != ""
    assert labelled.mean() >= 0.99
    abnormal = np.isin(symbols, ABNORMAL)
    assert abnormal.sum() >= 40
    assert auroc(scores[labelled], abnormal[labelled]) >= 0.9
    held_out = labelled & ~is_train.numpy()
    assert auroc(scores[held_out], abnormal[held_out]) >= 0.9  # also on beats the VAE never saw
    premature = np.isin(symbols, ("V",))
    normal = symbols == "N"
    assert np.median(scores[premature]) > np.quantile(scores[normal], 0.95)


def _pairwise_auroc(scores, positive) -> float:
    """P(score of a random positive > score of a random negative), ties counting one half."""
    pos, neg = scores[positive], scores[~positive]
    difference = pos[:, None] - neg[None, :]
    return float(((difference > 0).sum() + 0.5 * (difference == 0).sum()) / difference.size)


def test_auroc_equals_pairwise_count(trained, synthetic_beats):
    model, *_ = trained
    rows, symbols = synthetic_beats
    scores = score_beats(model, rows)[0].numpy()
    abnormal = np.isin(symbols, ABNORMAL)
    assert auroc(scores, abnormal) == pytest.approx(_pairwise_auroc(scores, abnormal), abs=1e-12)
    rng = np.random.default_rng(3)
    tied = rng.integers(0, 4, 300).astype(float)  # many ties
    positive = rng.random(300) < 0.3
    assert auroc(tied, positive) == pytest.approx(_pairwise_auroc(tied, positive), abs=1e-12)
    assert auroc(tied, ~np.zeros(300, bool)) != auroc(tied, ~np.zeros(300, bool))  # NaN with one class
