"""The page: ``panel serve dashboard/app.py --args [--input X] [--device cpu] [--samples N] [--epochs E]``.

The pipeline runs once per server process (:func:`dashboard.startup.process_job`, in a
background thread). Every browser session gets an :class:`App`: while the run is going it shows
the stage, percent and elapsed time, polling the shared progress from a periodic callback of its
own document; once the run is ready it swaps in the dashboard (its own :class:`DataStore` and
board over the shared, read-only run) without a reload. A failed run shows its one-line error, the
server's arguments and the command that started it, and the server stays up.

See Also
--------
dashboard.startup : arguments, the job, its progress.
dashboard.page.layout : the dashboard body.
"""
from __future__ import annotations

import base64
import contextlib
import importlib.util
import sys
import threading
import time
import traceback
from functools import partial
from pathlib import Path
from typing import Callable

if __package__ in (None, "") and str(Path(__file__).resolve().parent.parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `panel serve dashboard/app.py`

import panel as pn
import param
from panel.io.state import set_curdoc

from dashboard import server_gc, startup
from dashboard.archive import SPEC as ARCHIVE_SPEC
from dashboard.archive import ArchiveView, run_inside
from dashboard.bokeh_checks import skip_document_checks
# Imported with the app, not with the first board: the page's first document must carry the
# definitions of the dashboard's own models (Brush, Arrival), or the browser cannot build them.
from dashboard.charts import BokehBoard
from dashboard.data_store import DataStore, in_session
from dashboard.events import EventList
from dashboard.page import card, layout
from dashboard.reference_choice import ReferencePicker, References, failure, reference_id, server_references
from dashboard.review import ReviewPanel
from dashboard.shared_run import BACKGROUND_DELAY_S, SharedRun
from dashboard.spec import ASSETS, STYLESHEET, duration
from dashboard.views import RecordingHeader, SelectionSummary, escape, html, recording_name
from dashboard.waiting import ProgressView, error_view

TITLE = "ECG explorer · abnormal heartbeats"
POLL_MS = 400
PAGE_CSS = (ASSETS / "dashboard.css").read_text()
LOGO = (ASSETS / "logo.svg").read_text()


# --------------------------------------------------------------------------- boards
def resolve_board(board: str, run) -> str:
    """``auto`` → ``bokeh`` (the linked charts drawn straight into Bokeh, on either device: it
    meets the latency targets); ``cuxfilter`` on request for a GPU run."""
    if board == "auto":
        return "bokeh"
    if board == "cuxfilter" and (run.report["device"]["name"] != "gpu" or importlib.util.find_spec("cuxfilter") is None):
        raise ValueError("board 'cuxfilter' needs a GPU run (--device gpu) with cuDF and cuxfilter installed; "
                         "use --board bokeh")
    return board


def make_board(store: DataStore):
    if store.shared.extras.get("board") == "cuxfilter":
        from dashboard import cuxfilter_board   # cuDF and cuxfilter load here, never on the CPU path

        return cuxfilter_board.CuxfilterBoard(store)
    return BokehBoard(store)


def warm_up(shared: SharedRun) -> float:
    """Build a throwaway dashboard and brush it once, so that the per-run data the views share
    (bin indexes, raster levels) and any compilation exist before the first user arrives.
    Returns the seconds it took."""
    from bokeh.document import Document

    started = time.perf_counter()
    doc = Document()
    with set_curdoc(doc):
        store = DataStore(shared)
        body, views = layout(store, make_board(store))
        root = body.get_root(doc)
        doc.add_root(root)
        lo, hi = shared.extent("length_s")
        store.update(brush={"length_s": (lo, lo + (hi - lo) / 2)}, time_range=(0.0, shared.duration_s / 2))
        store.update(brush={}, time_range=None, focus=0)
        body._cleanup(root)
    return time.perf_counter() - started


def prepare(settings: startup.Settings):
    """What the job does after the pipeline, once per process: the shared data of the chosen board."""
    def _prepare(run) -> SharedRun:
        from dashboard.recording_view import signal_raster

        board = resolve_board(settings.board, run)
        shared = SharedRun.from_run(run)
        shared.extras["board"] = board
        # What only some views need, and takes seconds, loads once the first page is up rather than
        # before it: PyTorch and the model (the decoded centre), Datashader's compiled line drawing
        # (the recording's raster; the browser draws its levels as a line until then).
        shared.extras["first_page"] = first_page = threading.Event()
        shared.load_model(background=True, after=first_page)
        raster = signal_raster(shared)
        raster.compile_in_background(after=first_page, delay_s=BACKGROUND_DELAY_S)
        server_gc.loads_started()
        threading.Thread(target=freeze_when_loaded, args=(shared, raster), name="ecg-freeze", daemon=True).start()
        if board == "cuxfilter":
            from dashboard import cuxfilter_board

            cuxfilter_board.prepare(shared)
            startup._log(f"ECG dashboard: views warmed up in {warm_up(shared):.1f} s ({board} board)")
        server_gc.freeze_run()   # everything alive now lives as long as the process
        return shared
    return _prepare


def finish_rescored(shared: SharedRun) -> None:
    """What a rescored recording (:meth:`SharedRun.rescored`) needs beyond its shared data: the
    cuxfilter board's frame holds the scores, so it is made again."""
    if shared.extras.get("board") == "cuxfilter":
        from dashboard import cuxfilter_board

        cuxfilter_board.prepare(shared)


def freeze_when_loaded(shared: SharedRun, raster) -> None:
    """Once the model and Datashader's drawing have loaded in the background, put what they made
    out of the garbage collector's sight as well (``prepare`` froze what existed before them;
    :func:`dashboard.server_gc.freeze_loads` says why)."""
    try:
        raster.compiled.wait()
        with contextlib.suppress(Exception):     # a model that failed to load says so where it is used
            shared.model
    finally:
        server_gc.freeze_loads()


# --------------------------------------------------------------------------- the page
def section(title: str, top: int = 10) -> pn.pane.HTML:
    """A title in the sidebar."""
    return html(f"<div class='ecg-card-title'>{title}</div>", margin=(top, 10, 0, 10))


def filters(store: DataStore) -> pn.Column:
    """The sidebar's filters of this session's selection. (The outlier threshold has its one
    slider above the outlier table.)"""
    def label(text: str) -> pn.pane.HTML:
        return html(f"<span class='ecg-label'>{text}</span>", margin=(8, 10, 0, 10))

    clear = pn.widgets.Button(name="Clear selection", button_type="default", sizing_mode="stretch_width")
    clear.on_click(lambda _: store.clear())
    return pn.Column(label("Beats shown"), store.widget("split", sizing_mode="stretch_width"),
                     store.widget("follow_window"), store.widget("rank_low_quality"), label("Colour the planes by"),
                     store.widget("colour_by", sizing_mode="stretch_width"), clear, sizing_mode="stretch_width",
                     css_classes=["ecg-controls"])


class App(pn.viewable.Viewer):
    """One browser session: progress, then the dashboard (or the error)."""

    state = param.String(default="waiting", doc="waiting | running | archive | ready | error (as this page shows it)")

    def __init__(self, job: startup.PipelineJob | None = None, error: str = "", archive=None,
                 open_run: Callable | None = None, references: References | None = None, asked_reference: str = "",
                 **params):
        """``references``: the server's references, which the header offers for rescoring (None: no
        choice); ``asked_reference``: the id this page's address asks for (``?reference=``), checked
        against them before it is used."""
        super().__init__(**params)
        self.job = job
        self.references = references
        self.reference_id = asked_reference or ""   # what this page asked for; validated where used
        self._base: SharedRun | None = None         # the recording as the server has it, before any rescoring
        self.store: DataStore | None = None
        self.above: list = []          # what stays above the dashboard (an archive's recordings)
        self.archive_sidebar: list = []  # and above the sidebar (the archive's totals and search)
        self.board = None
        self.views: dict = {}
        self._callback = None
        self.progress: ProgressView | None = None
        self.main = pn.Column(sizing_mode="stretch_width", css_classes=["ecg-main"])
        self.sidebar = pn.Column(width=290, css_classes=["ecg-sidebar"], stylesheets=[STYLESHEET])
        self.statusbar = html("", css_classes=["ecg-status"], margin=(0, 12))
        if archive is not None:
            self._open_run = open_run
            self.archive = ArchiveView(archive, self.open)
            self.above = [card(ARCHIVE_SPEC, self.archive)]
            self.archive_sidebar = [section("Archive"), self.archive.sidebar]
            self.sidebar.objects = list(self.archive_sidebar)
            self.main.objects = [*self.above, self.statusbar]
            self.statusbar.object = "Open a recording of the archive: click its row or its point."
            self.state = "archive"
        elif error or job is None:
            self._show_error(error or "no pipeline job")
        else:
            doc = pn.state.curdoc
            live = doc is not None and doc.session_context is not None
            visitor = live and doc.session_context.server_context is not None   # not --warm's page
            if visitor:
                # While the job only finds and reads a cached run (well under a second), a visitor
                # waits for it rather than get a progress page that turns into the dashboard at
                # its next poll (that swap cost the first visitor of a start ~1 s on two cores).
                ready = job.wait_unless_computing(startup.CACHED_WAIT_S).state == "ready"
                first_page = job.result.extras.get("first_page") if ready else None
                if first_page is not None and first_page.is_set():
                    self._build_once_shown()
                    return
            self._poll()
            if self.state not in ("ready", "error"):
                # A session's own document polls the shared job for its progress (served pages
                # only: without a server session there is no event loop to run it, and tests call
                # _poll themselves). A visitor's page is also woken as soon as the job ends.
                self._callback = pn.state.add_periodic_callback(self._poll, period=POLL_MS, start=live)
                if visitor:
                    schedule = in_session(doc)
                    job.when_done(lambda: schedule(partial(self._wake, doc)))

    # ------------------------------------------------------------------ states
    def _wake(self, doc) -> None:
        """The job has ended: show the dashboard (or the error) now, not at the next poll."""
        with set_curdoc(doc):
            self._poll()

    def _poll(self) -> None:
        if self.state in ("ready", "error"):     # woken by the job after a poll had shown it
            return
        progress = self.job.snapshot()
        if progress.state == "ready":
            self._stop()
            try:
                self._show_run(self.job.result)
            except Exception as err:  # show it on the page; the server and other sessions go on
                startup._log(traceback.format_exc())
                self._show_error(f"the dashboard could not be built: {type(err).__name__}: {err}")
        elif progress.state == "error":
            self._stop()
            self._show_error(progress.error)
        else:
            if self.progress is None:
                self.progress = ProgressView()
                self.main.objects = [self.progress.panel]
            self.progress.show(progress)
            self.state = "running"

    def _build_once_shown(self) -> None:
        """Send the page with a line saying the dashboard is coming, and build the dashboard as soon
        as the browser shows that page: building a session's ~400 Bokeh models takes 0.3-1 s, and
        the page's HTML waits for it (on two cores, first paint 0.9-1.0 s instead of ~2 s, every
        view drawn no later). Not for a server's first page, whose arrival starts the background
        loads (PyTorch, Datashader's compilation): built at once, it is up before they start."""
        self.statusbar.object = "Building the dashboard…"
        self.main.objects = [*self.above, self.statusbar]
        # (No pn.io.hold around it: until its onload callbacks have run, Panel counts the page as
        # not loaded and a hold would drop the changes instead of sending them.)
        pn.state.onload(self._poll)

    def _stop(self) -> None:
        if self._callback is not None:
            self._callback.stop()
            self._callback = None

    def _show_error(self, message: str) -> None:
        self.state = "error"
        self.main.objects = [pn.Column(*error_view(message), css_classes=["ecg-card", "ecg-error"],
                                       stylesheets=[STYLESHEET], sizing_mode="stretch_width", margin=(20, 10),
                                       max_width=900)]

    def open(self, run_dir: str, name: str) -> None:
        """Show the dashboard of one recording of the archive (instead of the one shown): say so at
        once, then load and build it on the next tick."""
        self.statusbar.object = f"Opening <b>{escape(name)}</b>…"
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            doc.add_next_tick_callback(lambda: self._open(run_dir, name))
        else:
            self._open(run_dir, name)

    def _open(self, run_dir: str, name: str) -> None:
        try:
            shared = self._open_run(run_dir)
        except Exception as err:     # a damaged or missing run: say so, keep the page
            self.statusbar.object = f"<span style='color:#9b1c1c'>{escape(name)}: {escape(err)}</span>"
            return
        if self.store is not None:
            self.store.close()
        with pn.io.hold():           # the sidebar and the body change in one message
            self._show_run(shared)

    # ------------------------------------------------------------------ the reference
    def _show_run(self, base: SharedRun) -> None:
        """Show a recording as the server has it, or as the reference this page asked for scores it."""
        self._base = base
        shared, message = base, ""
        if self.reference_id and self.references is not None and self.reference_id != reference_id(base.report):
            try:
                choice = self.references.choose(self.reference_id)
                shared = self.references.rescored(base, choice)
                message = (f"Scored against <b>{escape(choice.name)}</b>, as this page's address asks "
                           "(<code>?reference=…</code>).")
            except Exception as err:    # the page still shows the recording, as the server scored it
                message = f"<span style='color:#9b1c1c'>{escape(failure(err, 'the reference asked for'))}</span>"
        self._show_dashboard(shared, message=message)

    def rescore(self, choice_id) -> None:
        """What the header's Rescore does with the id chosen (:meth:`ReferencePicker.choose`): the
        open recording scored against that reference of the server's, or a refusal in words."""
        picker = self.views.get("reference")
        if picker is not None:
            picker.choose(choice_id)

    def _show_rescored(self, shared: SharedRun, choice) -> None:
        """Swap in the rescored recording, keeping this session's choices (brushes are dropped: the
        charts are new)."""
        before = self.store
        keep = {name: getattr(before, name) for name in ("threshold", "split", "follow_window", "rank_low_quality",
                                                          "colour_by")}
        focus, window, was = before.focus, before.time_range, self.views["header"].outliers()
        before.close()
        with pn.io.hold():
            self._show_dashboard(shared, keep=keep)
            now = self.views["header"].outliers()
            self.views["reference"].status.object = (
                f"Rescored with <b>{escape(choice.name)}</b>: <b>{now:,}</b> outliers at score ≥ "
                f"{self.store.threshold:.2f} ({was:,} before).")
            if focus is not None:
                self.store.update(focus=focus)
            if window is not None:                  # after the focus, which zooms to its beat
                self.store.update(zoom_to=window)
        self.reference_id = choice.id
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:   # a reload shows it again
            pn.state.location.update_query(reference=choice.id)

    def _show_dashboard(self, shared: SharedRun, keep: dict | None = None, message: str = "") -> None:
        """``keep``: the session's choices to carry over (the threshold, filters); ``message``: what
        the reference's line says (markup of the code's own), which opens the header's details."""
        self.store = DataStore(shared, **(keep or {}))
        self.board = make_board(self.store)
        body, self.views = layout(self.store, self.board)
        summary = SelectionSummary(self.store)
        self.views["summary"] = summary
        tools = ()
        if self.references is not None:
            self.views["reference"] = picker = ReferencePicker(self.references, self._base, reference_id(shared.report),
                                                               self._show_rescored, message)
            tools = (picker,)
        self.views["header"] = header = RecordingHeader(self.store, tools=tools)
        if message or keep is not None:
            header.details.collapsed = False
        self.review = ReviewPanel(self.store)
        if self.above:
            self.statusbar.object = f"Showing <b>{escape(recording_name(shared))}</b> below."
        self.sidebar.objects = [
            *self.archive_sidebar,
            section("Selection"), summary,
            section("Filters", top=14), filters(self.store),
            section("Pauses and episodes", top=14), EventList(self.store),
            section("Review", top=14), self.review,
            html("<div class='ecg-card-title'>How to explore</div>"
                 "<div class='ecg-card-help'>Click an outlier in the table to see that beat, its strip at paper "
                 "speed and the recording around it. Brush a range in the length or score histogram, or a box in "
                 "the latent space or the Poincaré plot: every beat view, the recording's markers and the "
                 "outlier table follow (each chart shows what the other charts' brushes select). Double-click a "
                 "chart to clear its brush. Zoom the recording to restrict everything to that stretch of time. "
                 "Hover a column's title in the table for its meaning.</div>", margin=(14, 10, 0, 10)),
            html(f"<div class='ecg-muted'>Board: {self.board.name} · input "
                 f"{escape(Path(shared.report['input']['path']).name)} · "
                 f"{duration(shared.duration_s)}</div>", margin=(14, 10)),
        ]
        self.main.objects = [*self.above, *([self.statusbar] if self.above else []), header, body]
        self.state = "ready"
        if "first_page" in shared.extras:   # the page is drawn: what waited for it may start
            pn.state.onload(shared.extras["first_page"].set)

    # ------------------------------------------------------------------ page
    def page(self) -> pn.Column:
        """The whole page: a header, the sidebar and the main area (no template: fewer models and
        resources for every new session)."""
        header = html(f"<div class='ecg-header'>{LOGO}<span>{TITLE}</span></div>", margin=0,
                      css_classes=["ecg-header-bar"])
        return pn.Column(header, pn.Row(self.sidebar, self.main, sizing_mode="stretch_width"),
                         sizing_mode="stretch_width", css_classes=["ecg-page"])

    def __panel__(self):
        return pn.Column(self.sidebar, self.main, sizing_mode="stretch_width")


def own_resources() -> None:
    """Have this session's page load its scripts and styles from this server, whatever its request
    says. Panel 1.7 takes the page's resource host from a request's ``bokeh-absolute-url`` (meant
    for pages that embed an app through ``autoload.js``): a link to
    ``/app?bokeh-absolute-url=http://elsewhere`` made the page load BokehJS and Panel from
    there, running that host's JavaScript with this page's rights. Panel reads the argument as
    the session starts, before this script runs, and writes the page after it; this puts back
    the relative path Panel gives a page that names no host."""
    doc = pn.state.curdoc
    context = doc.session_context if doc is not None else None
    if context is None or context.server_context is None:     # no page to write (--warm, tests)
        return
    url = context.server_context.application_context.url or "/"
    pn.state.rel_path = "/".join([".."] * url.strip("/").count("/"))


def serve_page(argv: list[str] | None = None) -> App:
    """Build this session's page from the server's arguments (never from the request)."""
    own_resources()
    if pn.state.curdoc is not None:     # a served session (not a page built in a test)
        pn.state.on_session_destroyed(server_gc.collect_after_session_end)
    try:
        settings = startup.server_settings(sys.argv[1:] if argv is None else argv)
        references = server_references(settings, finish_rescored)
        asked = asked_reference()
        if settings.archive:
            from pipeline.archive import read_archive

            return App(archive=read_archive(settings.archive),
                       open_run=lambda run_dir: startup.archived_run(run_inside(settings.archive, run_dir),
                                                                     prepare(settings)),
                       references=references, asked_reference=asked)
    except ValueError as err:
        return App(error=str(err))
    return App(job=startup.process_job(settings, prepare=prepare(settings)), references=references,
               asked_reference=asked)


def asked_reference() -> str:
    """The reference id this session's address asks for (``?reference=``): text a page sent, only
    ever compared with the ids the server made."""
    value = (pn.state.session_args.get("reference") or [b""])[0]
    return value.decode("utf-8", "replace")[:64] if isinstance(value, bytes) else ""


def speedups_script() -> str:
    """``dashboard/assets/bokeh_speedups.js`` (what it removes and why: its header) as a ``data:`` URL: Panel
    puts ``js_files`` right after BokehJS's scripts, and a served app has no static folder of its own."""
    code = (ASSETS / "bokeh_speedups.js").read_bytes()
    return "data:text/javascript;base64," + base64.b64encode(code).decode()


pn.extension(notifications=False, sizing_mode="stretch_width", raw_css=[PAGE_CSS],
             js_files={"ecg-bokeh-speedups": speedups_script()})
skip_document_checks()   # the page's integrity is a test's job, not each visitor's (see its module)

if __name__.startswith("bokeh_app"):
    # `panel serve` runs this file afresh for every session; the objects that must outlive a
    # session (the job, its prepare step) come from the imported module, which exists once.
    from dashboard.app import serve_page as _serve_page

    _page = _serve_page().page()
    # Panel adds the page, a Location and a BrowserInfo as the document's roots, and Bokeh re-walks
    # every model of the document after each (~40 ms each for a dashboard on two cores): frozen,
    # the walk happens once, when the three are in.
    with pn.state.curdoc.models.freeze():
        _page.servable(title=TITLE)
