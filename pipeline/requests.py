"""What a run is asked to do: :class:`RunRequest`, and :func:`run_request`, the one way that
parsed options become one.

Both parsers of options build their request here: the command line (``python -m pipeline run |
batch | evaluate``, :mod:`pipeline.__main__`) and the dashboard's server (``--args`` or ``ECG_*``
variables, :mod:`dashboard.settings`). Each parser checks its own values and words its own errors
(the server names the variable a value came from); the rules that turn checked values into a
request are these. The module imports nothing heavy, so that the server can read its arguments
before it starts the run's process.

See Also
--------
pipeline.run.run_pipeline : the conductor that runs a request.
dashboard.settings.settings_from : the server's options.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from pipeline.config import SignalConfig, VAEConfig


@dataclass(frozen=True)
class RunRequest:
    """Everything that defines a run; with the input's hash it names the cache entry."""

    input: str | None = None          # None: the synthetic default
    device: str = "auto"
    out: str = "runs"
    fs: float | None = None
    column: str | int | None = None
    samples: int | None = None        # size of the synthetic default (None: per device)
    seed: int = 0
    signal: SignalConfig = field(default_factory=SignalConfig)
    vae: VAEConfig = field(default_factory=VAEConfig)
    use_cache: bool = True
    reference: str | None = None      # reference beat model (.npz); None: the one shipped with the package
    # Run every kernel and reader once on a tiny recording first, so that the report's stage times
    # measure the work rather than one-off set-up. A server that only waits for the result skips
    # it: the set-up then falls inside the stages, and nothing is computed twice.
    warm_up: bool = True


def run_request(input: str | None = None, *, device: str = "auto", out: str = "runs", fs: float | None = None,
                lead: str | None = None, column: str | None = None, samples: int | None = None,
                epochs: int | None = None, use_cache: bool = True, reference: str | None = None,
                warm_up: bool = True) -> RunRequest:
    """The request that checked option values ask for.

    Parameters
    ----------
    input : recording path; None for the synthetic default.
    lead, column : the lead to analyse, by name or 0-based index (a string of digits is an
        index); two names for one option, which must agree when both are given.
    epochs : the VAE's training epochs; None for :class:`~pipeline.config.VAEConfig`'s default.
    device, out, fs, samples, use_cache, reference, warm_up : as :class:`RunRequest` has them.

    Raises ValueError when ``lead`` and ``column`` name different leads.
    """
    if lead is not None and column is not None and lead != column:
        raise ValueError(f"--lead {lead!r} and --column {column!r} name different leads; give one")
    lead = lead if lead is not None else column
    return RunRequest(input=input, device=device, out=out, fs=fs,
                      column=int(lead) if isinstance(lead, str) and lead.isdigit() else lead,
                      samples=samples, signal=SignalConfig(),
                      vae=VAEConfig() if epochs is None else replace(VAEConfig(), epochs=epochs),
                      use_cache=use_cache, reference=reference, warm_up=warm_up)
