"""The views, described once: what each shows, from which columns, as which kind of chart, which
of them are linked, where they sit on the page; and the colours and formats they share (Holter
conventions: hh:mm:ss, RR in ms, bpm, counts whose nouns agree, the outlier table's titles and units).

See Also
--------
dashboard.charts : the default board: draws the linked kinds (``histogram``, ``plane``; ``signal`` and
    ``tachogram`` through dashboard.recording_view).
dashboard.views : draws the others; dashboard.page lays the page out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"  # package data: a wheel installs it with the code
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
EPISODE_COLORS = {"flutter": "#c1121f", "noise": "#8d99ae", "lost": "#343a40", "pause": "#3a86ff"}
EPISODE_NAMES = {"flutter": "ventricular flutter/fibrillation", "noise": "noise", "lost": "signal lost",
                 "pause": "pause"}
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
    share: float = 1.0             # its part of a row's width, against the others' (a box of tabs: its first view's)


VIEWS = {v.name: v for v in (
    ViewSpec("signal", "The whole recording", "signal", x="time_s", xlabel="time (hh:mm:ss)", ylabel="amplitude",
             height=300,
             help="Scroll to zoom (down to single samples), drag to pan. Green dots: selected beats; "
                  "red triangles: outliers above the threshold. Zooming filters the beat views to the window."),
    ViewSpec("rhythm", "RR tachogram", "tachogram", x="time_s", y="rr_prev_s", xlabel="time (hh:mm:ss)",
             ylabel="RR (s)", height=170,
             help="The RR interval before each beat over time, in seconds (follows the recording's zoom). Green "
                  "dots: selected beats; red triangles: outliers."),
    ViewSpec("lengths", "Beat length", "histogram", x="length_s", bins=60, brush=("length_s",),
             xlabel="beat length: RR to the next beat (s)", ylabel="beats",
             help="How long each beat lasts (the RR interval to the next beat). Drag across bars to select a "
                  "length range; double-click to clear it."),
    ViewSpec("latent", "Beat shapes (VAE latent space)", "plane", x="z1", y="z2", brush=("z1", "z2"),
             xlabel="z1 (shape coordinate 1)", ylabel="z2 (shape coordinate 2)",
             help="Each beat placed by its shape: the VAE sums a beat up in two numbers, z1 and z2, so beats "
                  "of like shape lie close together. Coloured by outlier score. Drag a box to select beats; "
                  "double-click to clear."),
    ViewSpec("poincare", "Poincaré plot", "plane", x="rr_prev_s", y="rr_next_s", brush=("rr_prev_s", "rr_next_s"),
             xlabel="RRₙ: interval before the beat (s)", ylabel="RRₙ₊₁: interval after (s)",
             help="Premature beats sit left of the diagonal and high (short before, long after). Drag a box to "
                  "select beats; double-click to clear."),
    ViewSpec("scores", "Outlier score", "histogram", x="score", bins=80, brush=("score",),
             xlabel="outlier score", ylabel="beats", logy=True, threshold=True,
             help="How unusual each beat is (higher: rarer). Drag across bars to select a score range; the red "
                  "line is the outlier threshold (set above the outlier table)."),
    ViewSpec("outliers", "Outliers, most unusual first", "table", height=360, controls=("threshold",), share=3,
             help="Selected beats above the threshold, highest score first. Click a row to see the beat, its "
                  "strip and its reconstruction. Hover a column's title for its meaning."),
    ViewSpec("beat", "Beat and its reconstruction", "beat", height=300, tab="Beat", share=2,
             help="The focused beat as the VAE saw it (solid) and the VAE's reconstruction of it, decode(μ): "
                  "the beat rebuilt from its place in the latent space. A beat the model rebuilds badly is "
                  "unlike the recording's usual beats."),
    ViewSpec("strip", "Strip at paper speed", "strip", height=300, tab="Strip",
             help="The focused beat ± 5 s at 25 mm/s and 10 mm/mV, on the standard grid."),
    ViewSpec("families", "Beat families", "families", height=420, tab="Families",
             help="Beats grouped by shape: each family's template (median, with the middle half of its beats "
                  "shaded). Click a family to select its beats; label it in the Review panel."),
    ViewSpec("decoded", "Decoder outputs over the latent plane", "decoded", height=300, tab="Decoder",
             help="What the VAE draws at nine places of the latent plane, decode(z) for z = (z1, z2) on a 3 × 3 "
                  "grid spanning the central 90% of the beats: how beat shape changes across the plane."),
    ViewSpec("centre", "Selection centre", "centre", height=300, tab="Centre",
             help="The mean of the selected beats beside the VAE's beat at their mean latent position, "
                  "decode(mean z)."),
)}
LINKED = tuple(name for name, v in VIEWS.items() if v.brush)   # brushes here filter every beat view
# Rows of cards; a tuple in a row is one card with a tab per view (only the open tab is drawn). The
# outlier list and the focused beat come right below the recording, so that a 1600 × 1000 screen
# shows the list's first rows without scrolling; the tachogram and the linked charts follow.
LAYOUT = (("signal",), ("outliers", ("beat", "strip", "families", "centre", "decoded")), ("rhythm",),
          ("lengths", "scores", "latent", "poincare"))
RENDERED_BY_BOARD = ("signal", "tachogram", "histogram", "plane")


# --------------------------------------------------------------------------- formats
# Holter conventions: times as hh:mm:ss, RR intervals in ms, heart rate in bpm, counts with their
# noun agreeing. Every view formats through these (and the browser through the templates below).
def hms(seconds: float, decimals: int = 1) -> str:
    """``seconds`` as hh:mm:ss (with ``decimals`` of a second): 919.9 → '00:15:19.9'."""
    sign = "-" if seconds < 0 else ""
    s = round(abs(float(seconds)), decimals)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    width = 3 + decimals if decimals else 2
    return f"{sign}{int(h):02d}:{int(m):02d}:{sec:0{width}.{decimals}f}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    h, m = divmod(int(round(seconds / 60)), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def noun(count: int, word: str, many: str | None = None) -> str:
    """``word`` agreeing with ``count``: 'beat' for 1, else 'beats' (``many``: a plural not ``word`` + 's')."""
    return word if count == 1 else (many or word + "s")


def plural(count: int, word: str, many: str | None = None) -> str:
    """'1 beat', '2 beats', '1,371 beats'."""
    return f"{count:,} {noun(count, word, many)}"


def one_in(p: float) -> str:
    """A tail probability as '1 in N' (smaller p: rarer), N with two significant digits from 10,000."""
    if not p == p or p <= 0:           # NaN or no probability: nothing to say
        return "–"
    count = 1.0 / p
    if count < 1e4:
        return f"1 in {count:,.0f}"
    return f"1 in {float(f'{count:.2g}'):,.0f}"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds == seconds else "–"


def no_label(label) -> str:
    """A label for display: a blank one (no label) as '–', never confused with 'N'."""
    return str(label) if label not in (None, "") else "–"


# What a brush on a column selects, in words and the clinic's units: (name, unit, scale, digits).
BRUSH_NAMES = {"length_s": ("Beat length", "ms", 1000.0, 0), "rr_prev_s": ("RR before", "ms", 1000.0, 0),
               "rr_next_s": ("RR after", "ms", 1000.0, 0), "score": ("Outlier score", "", 1.0, 2),
               "z1": ("Shape z1", "", 1.0, 2), "z2": ("Shape z2", "", 1.0, 2)}


def brush_text(column: str, lo: float, hi: float) -> str:
    """One brush in words: ('length_s', 0.454, 0.787) → 'Beat length 454–787 ms'."""
    if column == "time_s":
        return f"Time {hms(lo, 0)}–{hms(hi, 0)}"
    if column == "family":
        return f"Family #{int(lo)}" if lo == hi else f"Families #{int(lo)}–#{int(hi)}"
    name, unit, scale, digits = BRUSH_NAMES.get(column, (column, "", 1.0, 3))
    a, b = f"{lo * scale:.{digits}f}", f"{hi * scale:.{digits}f}"
    between = " to " if lo < 0 or hi < 0 else "–"       # '-0.20 to 0.35', never '-0.20–0.35'
    return f"{name} {a}{between}{b}" + (f" {unit}" if unit else "")


# The ranked outlier table's columns: field → (title, what it means, format, width in px). Formats:
# 'hms' (seconds as hh:mm:ss.s), 'one_in' (a tail probability as '1 in N'), 'text', or a Bokeh
# NumberFormatter pattern. The fields are those of dashboard.views.OutlierTable's data.
TABLE_COLUMNS = {
    "beat_id": ("Beat", "the beat's number in the recording", "text", 46),
    "time_s": ("Time", "when the beat occurs, hh:mm:ss from the start of the recording", "hms", 72),
    "score": ("Score", "outlier score: how unusual the beat is; higher is rarer", "0.00", 48),
    "rr_before_ms": ("RR before (ms)", "interval from the previous beat, ms", "0", 68),
    "rr_pre": ("RR before (× local RR)", "the interval before the beat divided by the median RR around it: "
               "0.70 = 30 % early (premature)", "0.00", 84),
    "rr_post": ("RR after (× local RR)", "the interval after the beat divided by the median RR around it: "
                "1.30 = a pause after it", "0.00", 84),
    "length_ms": ("Beat length (ms)", "the beat's length: interval to the next beat, ms", "0", 70),
    "p_shape": ("Shape rarity", "how rare the beat's shape is in this recording: 1 in N beats is as unusual "
                "(larger N: rarer)", "one_in", 82),
    "label": ("Reference label", "the reference annotation's label (– none)", "text", 74),
    "review": ("Your label", "the label you or another reviewer gave this beat", "text", 76),
}

# Seconds → hh:mm:ss in the browser (axis ticks and table cells: nothing to compile).
HMS_JS = """
    const s = Math.abs(value), sign = value < 0 ? '-' : '';
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    const text = digits > 0 ? sec.toFixed(digits).padStart(3 + digits, '0') : Math.floor(sec).toString().padStart(2, '0');
    return sign + h.toString().padStart(2, '0') + ':' + m.toString().padStart(2, '0') + ':' + text;
"""
# A table cell's seconds as hh:mm:ss.s, and a tail probability as '1 in N' (HTMLTemplateFormatter
# templates: the columns travel as float64/float32 and sort as numbers).
HMS_CELL = ("<%= (function (value) { const digits = 1;" + " ".join(HMS_JS.split()) + " })(value) %>")
ONE_IN_CELL = ("<%= (function (p) { if (!(p > 0)) return '–'; const n = 1 / p;"
               " const shown = n < 1e4 ? Math.round(n) : Number(n.toPrecision(2));"
               " return '1 in ' + shown.toLocaleString('en-US'); })(value) %>")


def hms_tick_formatter():
    """A new hh:mm:ss tick formatter (a Bokeh model belongs to one document, i.e. one session)."""
    from bokeh.models import CustomJSTickFormatter

    return CustomJSTickFormatter(code=f"""
        const span = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 60;
        const digits = span < 1 ? 2 : 0;
        const value = tick;
        {HMS_JS}""")
