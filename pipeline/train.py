"""Train the VAE on a seeded 75 % of the beats, on the device the beats already live on.

Two functions do the work: :func:`build_step` builds the training step (rows → loss → gradients →
Adam update), plain, or on the GPU captured once as a CUDA graph per batch shape (an epoch's full
batches and its last, shorter one) and then replayed with a single launch; :func:`fit_vae` runs
the epochs and stops when the loss levels off. Randomness stays outside the graphs: an epoch draws
its batch order at once, and each step draws its reparameterisation noise (into the buffer its
graph reads) from the same seeded generator, as the plain step does.

See Also
--------
pipeline.embed.embed_beats : the previous step.
pipeline.score.score_beats : the next step.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.optim.adam import adam as adam_update

from pipeline import PipelineWarning
from pipeline.config import VAEConfig
from pipeline.model import VAE

WARMUP_STEPS = 3  # eager steps before a capture: cuDNN/cuBLAS workspaces, Adam's state, autograd's streams


def split_train(n_beats: int, train_fraction: float, seed: int) -> torch.Tensor:
    """Boolean mask (CPU) of the training beats: a seeded permutation, the same on every device."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be between 0 and 1; got {train_fraction}")
    order = torch.randperm(n_beats, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(n_beats, dtype=torch.bool)
    mask[order[: max(1, int(round(train_fraction * n_beats)))]] = True
    return mask


# --------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class TrainingPlan:
    """Batch size, steps per epoch and Adam's learning rate for ``n_train`` training rows."""

    batch: int
    steps_per_epoch: int
    learning_rate: float


def plan_training(n_train: int, cfg: VAEConfig) -> TrainingPlan:
    """``cfg.batch_size`` rows per step, fewer when that would leave under ``cfg.min_steps_per_epoch``
    steps per epoch; the learning rate grows with sqrt(batch / ``cfg.lr_reference_batch``) above it."""
    batch = max(1, min(cfg.batch_size, n_train // cfg.min_steps_per_epoch or n_train))
    rate = cfg.learning_rate * math.sqrt(max(batch, cfg.lr_reference_batch) / cfg.lr_reference_batch)
    return TrainingPlan(batch, math.ceil(n_train / batch), rate)


def converged(history: list[float], cfg: VAEConfig, steps_per_epoch: int) -> bool:
    """True when the best epoch loss of the last ``cfg.patience`` epochs is not ``cfg.tolerance``
    (relative) below the best loss before them, and at least ``cfg.min_steps`` optimiser steps
    have been taken. The best, not the last: one noisy epoch neither stops training nor keeps it
    going."""
    if cfg.tolerance <= 0 or len(history) <= cfg.patience or len(history) * steps_per_epoch < cfg.min_steps:
        return False
    before, recent = min(history[:-cfg.patience]), min(history[-cfg.patience:])
    return before - recent < cfg.tolerance * abs(before)


# --------------------------------------------------------------------------- Adam
class Adam:
    """Adam (PyTorch's default betas and eps, no weight decay) over ``params``: the update of
    ``torch.optim.Adam``, made by the same function (``torch.optim.adam.adam``), without that class.
    The class imports ``torch._dynamo`` (with sympy, most of a second) at its first ``step`` and
    ``zero_grad``, whatever the model, and a cold server start waits for it.
    ``state`` holds each parameter's step count and moments under ``torch.optim.Adam``'s names.
    ``fused`` and ``capturable`` (CUDA only) mean what they mean there: a capturable Adam keeps
    its step counts on the device, so a CUDA graph can replay the update."""

    def __init__(self, params, lr: float, *, fused: bool = False, capturable: bool = False):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.fused, self.capturable = lr, fused, capturable
        on_device = fused or capturable
        self.state = {p: {"step": torch.zeros((), dtype=torch.float32, device=p.device if on_device else "cpu"),
                          "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                          "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}
                      for p in self.params}

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        params = [p for p in self.params if p.grad is not None]
        states = [self.state[p] for p in params]
        adam_update(
            params, [p.grad for p in params], [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states],
            [], [s["step"] for s in states], fused=self.fused or None, capturable=self.capturable,
            amsgrad=False, beta1=0.9, beta2=0.999, lr=self.lr, weight_decay=0.0, eps=1e-8, maximize=False)


# --------------------------------------------------------------------------- one step
class Step:
    """The training step: ``step(index)`` runs one Adam update on ``train[index]``, drawing the
    reparameterisation noise from the step's generator, and adds the batch's summed loss to
    ``loss_sum`` (a device scalar, read once per epoch). ``captured`` says whether it replays
    CUDA graphs. The step holds its optimiser: captured graphs write into the optimiser's state
    tensors, and memory freed under a graph would be handed to other tensors that the next replay
    then overwrites."""

    def __init__(self, run: Callable[[torch.Tensor], None], loss_sum: torch.Tensor, captured: bool,
                 optimizer: Adam | torch.optim.Adam):
        self.run, self.loss_sum, self.captured, self.optimizer = run, loss_sum, captured, optimizer

    def __call__(self, index: torch.Tensor) -> None:
        self.run(index)


def build_step(model: VAE, optimizer: Adam | torch.optim.Adam, train: torch.Tensor, batch_sizes: Sequence[int],
               generator: torch.Generator, *, capture: bool = False, mixed_precision: bool = False) -> Step:
    """The training step on the rows of ``train``, plain or (``capture``, CUDA only) captured.

    ``batch_sizes``: the batch lengths it will be called with (see :func:`batch_lengths`);
    ``generator``: where the reparameterisation noise comes from (a standard normal
    (len(index), latent_dim) draw per step, the same draws for both kinds of step). A captured
    step records one CUDA graph per length after a few eager warm-up steps on a side stream
    (which create cuDNN/cuBLAS workspaces and Adam's state outside the graphs); the warm-up's
    updates are then undone, so plain and captured steps start from the same weights and
    optimiser state. Each call copies the batch's indices into the input buffer of the graph of
    its length, draws the noise into the graph's noise buffer and replays the graph. Capture
    needs an Adam built with ``capturable=True`` and PyTorch's own CUDA allocator (its
    graph-private memory pools).
    """
    device = train.device
    latent = model.cfg.latent_dim
    loss_sum = torch.zeros((), device=device)
    bf16 = device.type == "cuda" and mixed_precision

    def update(index: torch.Tensor, noise: torch.Tensor) -> None:
        # autocast's weight cache must be off inside a graph: cached casts would be baked in
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not capture) if bf16 else contextlib.nullcontext():
            _, loss = model(train.index_select(0, index), noise)
        loss.backward()
        optimizer.step()
        loss_sum.add_(loss.detach().float() * index.shape[0])  # the batch mean, back to a sum over rows

    if not capture:
        def plain(index):
            optimizer.zero_grad(set_to_none=True)
            update(index, torch.randn(index.shape[0], latent, generator=generator, device=device))

        return Step(plain, loss_sum, captured=False, optimizer=optimizer)

    if device.type != "cuda":
        raise ValueError(f"a captured training step needs a CUDA device; the rows are on {device}")
    buffers = {size: (torch.zeros(size, dtype=torch.long, device=device), torch.zeros(size, latent, device=device))
               for size in sorted(set(batch_sizes))}
    graphs = _capture({size: (lambda b=b: update(*b)) for size, b in buffers.items()}, model, optimizer)
    loss_sum.zero_()

    def replay(index):
        index_buffer, noise_buffer = buffers[index.shape[0]]
        index_buffer.copy_(index)
        noise_buffer.normal_(generator=generator)  # eager, outside the graph: the same draw as the plain step's
        graphs[index.shape[0]].replay()

    return Step(replay, loss_sum, captured=True, optimizer=optimizer)


def _capture(work: dict, model: VAE, optimizer: Adam | torch.optim.Adam) -> dict:
    """Record each ``work[size]()`` (forward, backward, Adam) as a CUDA graph with its own memory
    pool; leave the model and optimiser as they were before the warm-up."""
    initial = [p.detach().clone() for p in model.parameters()]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*capturable=True.*")  # eager steps of a capturable Adam
        for run in work.values():
            for _ in range(WARMUP_STEPS):
                optimizer.zero_grad(set_to_none=True)
                run()
    torch.cuda.current_stream().wait_stream(side)
    graphs = {}
    for size, run in work.items():
        graphs[size] = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)  # so that backward allocates the gradients in the graph's pool
        with torch.cuda.graph(graphs[size]):
            run()
    with torch.no_grad():  # undo the warm-up: initial weights, a fresh Adam (step 0, zero moments)
        for parameter, value in zip(model.parameters(), initial):
            parameter.copy_(value)
        for state in optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    value.zero_()
    return graphs


# --------------------------------------------------------------------------- epochs
def fit_vae(rows: torch.Tensor, is_train: torch.Tensor, cfg: VAEConfig = VAEConfig(),
            progress: Callable[[float, str], None] | None = None) -> tuple[VAE, list[float]]:
    """Fit a :class:`~pipeline.model.VAE` to ``rows[is_train]``.

    ``rows`` is an (n, width) float32 tensor on the CPU or a CUDA device; batches are index
    slices of it on that device, so no step copies data to or from the host. Each epoch visits
    every training row once, in a seeded random order, in batches of :func:`plan_training`'s size
    (the last one shorter). The epoch's mean loss per row is read back once per epoch, the only
    sync point, for ``history``, ``progress(fraction, text)`` and the convergence stop
    (:func:`converged`). On the GPU the step replays captured CUDA graphs unless
    ``cfg.cuda_graph`` is off; if capture fails, training goes on with the plain step and a
    :class:`~pipeline.PipelineWarning` says so.
    """
    if rows.ndim != 2:
        raise ValueError(f"beats must be 2-D (n_beats, width); got shape {tuple(rows.shape)}")
    device = rows.device
    train = rows[is_train.to(device)]
    n_train = train.shape[0]
    if n_train < 2:
        raise ValueError(f"need at least 2 training beats; got {n_train}")
    plan = plan_training(n_train, cfg)
    with cudnn_autotuned(device.type == "cuda"):
        generator = torch.Generator(device=device).manual_seed(cfg.seed)  # batch order and noise
        model, step = _model_and_step(train, plan, cfg, generator)
        history: list[float] = []
        model.train()
        for epoch in range(cfg.epochs):
            step.loss_sum.zero_()
            for index in epoch_batches(n_train, plan, generator):
                step(index)
            history.append(step.loss_sum.item() / n_train)  # sync point: once per epoch
            done = converged(history, cfg, plan.steps_per_epoch)
            if progress:
                progress(1.0 if done else (epoch + 1) / cfg.epochs,
                         f"epoch {epoch + 1}/{cfg.epochs}, loss {history[-1]:.2f}" + (" (converged)" if done else ""))
            if done:
                break
    step.optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model, history


@contextlib.contextmanager
def cudnn_autotuned(on: bool):
    """Inside, cuDNN times its algorithms for each convolution shape once and keeps the fastest,
    which makes every later training step faster (the two batch shapes are timed while the step is
    captured, in the first epoch). Only for training: each shape met later (scoring's chunks, the
    decoded grid) would be timed again for a pass or two."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on or before
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


def batch_lengths(n_train: int, plan: TrainingPlan) -> list[int]:
    """The lengths of an epoch's batches: full ones, then the rest."""
    full, rest = divmod(n_train, plan.batch)
    return [plan.batch] * full + ([rest] if rest else [])


def epoch_batches(n_train: int, plan: TrainingPlan, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """One epoch's batches of row indices: a seeded permutation cut into :func:`batch_lengths`."""
    return torch.randperm(n_train, generator=generator, device=generator.device).split(plan.batch)


def _model_and_step(train: torch.Tensor, plan: TrainingPlan, cfg: VAEConfig, generator: torch.Generator):
    """A freshly seeded model and its step (which holds its Adam): captured on the GPU when asked, plain otherwise
    (and, with a warning, when capture fails: the model is then rebuilt, untouched by the attempt)."""
    device = train.device
    capture = device.type == "cuda" and cfg.cuda_graph
    while True:
        torch.manual_seed(cfg.seed)  # the initial weights
        model = VAE(train.shape[1], cfg).to(device)
        adam = dict(fused=True, capturable=capture) if device.type == "cuda" else {}
        optimizer = Adam(model.parameters(), lr=plan.learning_rate, **adam)
        try:
            step = build_step(model, optimizer, train, batch_lengths(int(train.shape[0]), plan), generator,
                              capture=capture, mixed_precision=cfg.mixed_precision)
            return model, step
        except Exception as err:  # capture unsupported here (driver, allocator, library version)
            if not capture:
                raise
            first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
            warnings.warn(f"CUDA graph capture of the training step failed ({type(err).__name__}: {first_line}); "
                          "training without it", PipelineWarning, stacklevel=3)
            capture = False
