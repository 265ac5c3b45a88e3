"""The views, described once: what each shows, from which columns, as which kind of chart, which
of them are linked, where they sit on the page; and the colours and formats they share.

See Also
--------
dashboard.charts : draws the linked kinds (``signal``, ``histogram``, ``latent``).
dashboard.views : draws the others and lays the page out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
STYLESHEET = (ASSETS / "components.css").read_text()

# --------------------------------------------------------------------------- colours
SIGNAL_COLOR = "#1d3557"
SELECTED_COLOR = "#2a9d8f"
OUTLIER_COLOR = "#e63946"
CENTRE_COLOR = "#e76f51"
MEAN_COLOR = "#457b9d"
MUTED = "#9aa5b1"
UNSELECTED_COLOR = "#c9d2dc"
SCORE_CMAP = ["#fde0c5", "#facba6", "#f8b58b", "#f59e72", "#f2855d", "#ef6a4c", "#eb4a40", "#c52a3f", "#8f1d3f"]
# Beat classes for colouring by label (AAMI classes of reference or review labels, then the
# reviewer's artefacts and own labels, then no label), in the order of precedence on a pixel that
# holds several: the rarer and more abnormal first.
CLASS_COLORS = {"V": "#e63946", "F": "#9b5de5", "S": "#f4a261", "Q": "#6b7785", "artefact": "#2b2d42",
                "other": "#ffb703", "N": "#8fa8c8", "": "#d9dee5"}
# Episodes (pipeline.episodes and the run's pauses): their band on the recording and the tachogram.
EPISODE_COLORS = {"flutter": "#c1121f", "noise": "#8d99ae", "pause": "#3a86ff"}
EPISODE_NAMES = {"flutter": "ventricular flutter/fibrillation", "noise": "noise", "pause": "pause"}
FAMILY_COLORS = ["#1d3557", "#e63946", "#2a9d8f", "#f4a261", "#9b5de5", "#457b9d", "#e9c46a", "#8d99ae",
                 "#bc4749", "#6a994e", "#c9d2dc"]   # the ten largest families, then the rest


@dataclass(frozen=True)
class ViewSpec:
    """One view: its kind, the beat columns it reads, and what a brush on it selects."""

    name: str
    title: str
    kind: str                      # signal | tachogram | histogram | plane | table | beat | strip | families | decoded | centre
    x: str | None = None
    y: str | None = None
    bins: int = 60
    brush: tuple[str, ...] = ()    # columns a brush on this view selects (linked views)
    xlabel: str = ""
    ylabel: str = ""
    logy: bool = False
    threshold: bool = False        # draws the outlier threshold
    controls: tuple[str, ...] = ()  # DataStore parameters with a widget on this view's card
    height: int = 280
    help: str = ""
    tab: str = ""                  # its tab's name, when it shares a box with others


VIEWS = {v.name: v for v in (
    ViewSpec("signal", "The whole recording", "signal", x="time_s", xlabel="time (h:mm:ss)", ylabel="amplitude",
             height=300,
             help="Scroll to zoom (down to single samples), drag to pan. Green dots: selected beats; "
                  "red triangles: outliers above the threshold. Zooming filters the beat views to the window."),
    ViewSpec("rhythm", "RR tachogram", "tachogram", x="time_s", y="rr_prev_s", xlabel="time (h:mm:ss)",
             ylabel="RR (s)", height=170,
             help="The interval before each beat over time (follows the recording's zoom). Green dots: selected "
                  "beats; red triangles: outliers."),
    ViewSpec("lengths", "Heartbeat length", "histogram", x="length_s", bins=60, brush=("length_s",),
             xlabel="beat length (s)", ylabel="beats",
             help="Drag across bars to select a length range; double-click to clear it."),
    ViewSpec("latent", "VAE latent space", "plane", x="z1", y="z2", brush=("z1", "z2"), xlabel="z1", ylabel="z2",
             controls=("split",),
             help="Density of the beats, coloured by their outlier score. Drag a box to select beats; "
                  "double-click to clear. Show all beats, the 75% the VAE trained on, or the 25% it never saw."),
    ViewSpec("poincare", "Poincaré plot", "plane", x="rr_prev_s", y="rr_next_s", brush=("rr_prev_s", "rr_next_s"),
             xlabel="RRₙ: interval before the beat (s)", ylabel="RRₙ₊₁: interval after (s)",
             help="Premature beats sit left of the diagonal and high (short before, long after). Drag a box to "
                  "select beats; double-click to clear."),
    ViewSpec("scores", "Outlier score", "histogram", x="score", bins=80, brush=("score",),
             xlabel="outlier score", ylabel="beats", logy=True, threshold=True, controls=("threshold",),
             help="Drag across bars to select a score range; the red line is the outlier threshold."),
    ViewSpec("outliers", "Ranked outliers in the selection", "table", height=360,
             help="Selected beats above the threshold, highest score first. Click a row to inspect it."),
    ViewSpec("beat", "Beat and its reconstruction", "beat", height=300, tab="Beat"),
    ViewSpec("strip", "Strip at paper speed", "strip", height=300, tab="Strip",
             help="The focused beat ± 5 s at 25 mm/s and 10 mm/mV, on the standard grid."),
    ViewSpec("families", "Beat families", "families", height=420, tab="Families",
             help="Beats grouped by shape: each family's template (median, with the middle half of its beats "
                  "shaded). Click a family to select its beats; label it in the Review panel."),
    ViewSpec("decoded", "Decoder outputs over the latent plane", "decoded", height=300, tab="Decoder",
             help="decode(z) on a 3 × 3 grid spanning the central 90% of the beats' latent positions."),
    ViewSpec("centre", "Selection centre", "centre", height=300, tab="Centre",
             help="decode(mean z of the selected beats) beside the mean of the selected beats themselves."),
)}
LINKED = tuple(name for name, v in VIEWS.items() if v.brush)   # brushes here filter every beat view
# Rows of cards; a tuple in a row is one card with a tab per view (only the open tab is drawn).
LAYOUT = (("signal",), ("rhythm",), ("lengths", "scores", "latent", "poincare"),
          ("outliers", ("beat", "strip", "families", "centre", "decoded")))
RENDERED_BY_BOARD = ("signal", "tachogram", "histogram", "plane")


# --------------------------------------------------------------------------- formats
def hms(seconds: float, decimals: int = 1) -> str:
    sign = "-" if seconds < 0 else ""
    s = round(abs(float(seconds)), decimals)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    width = 3 + decimals if decimals else 2
    return f"{sign}{int(h)}:{int(m):02d}:{sec:0{width}.{decimals}f}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    h, m = divmod(int(round(seconds / 60)), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


# Seconds → H:MM:SS in the browser (axis ticks and table cells: nothing to compile).
HMS_JS = """
    const s = Math.abs(value), sign = value < 0 ? '-' : '';
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    const text = digits > 0 ? sec.toFixed(digits).padStart(3 + digits, '0') : Math.floor(sec).toString().padStart(2, '0');
    return sign + h + ':' + m.toString().padStart(2, '0') + ':' + text;
"""


def hms_tick_formatter():
    """A new H:MM:SS tick formatter (a Bokeh model belongs to one document, i.e. one session)."""
    from bokeh.models import CustomJSTickFormatter

    return CustomJSTickFormatter(code=f"""
        const span = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 60;
        const digits = span < 1 ? 2 : 0;
        const value = tick;
        {HMS_JS}""")
