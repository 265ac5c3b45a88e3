"""The references a page may have its recording scored against, and the recordings rescored so.

Which references can be chosen is the server's decision, never a page's: the reference shipped
with the package, the one the server was started with (``--reference``, ``ECG_REFERENCE``), and
every ``.npz`` reference in ``references/`` of the server's runs folder (``--out``, or the
``--archive`` folder), listed afresh whenever a page is built, so that a reference trained while
the server runs appears without a restart. Each entry gets an id made here: the first 16 hex
digits of the reference's SHA-256 (one that cannot be read: of its name). A page sends only such
an id; :meth:`References.choose` refuses every other value, so no page can make the server open a
file of its choosing. File names and descriptions come from files: escape them where shown (the
select shows them as text).

Rescoring (:meth:`References.rescored`) computes only the reference's part of the score
(:func:`pipeline.rescore.rescore_run`: no training) and writes the rescored run as a cached run of its
own, under the key of that reference; the run shown is never rewritten. A page reloaded with
``?reference=<id>`` in its address reads that run again. The runs most recently rescored stay in
memory, shared by every session.

See Also
--------
pipeline.rescore.rescore_run : the rescoring.
dashboard.shared_run.SharedRun.rescored : the rescored recording's shared data.
dashboard.app.App.rescore : what a page's choice does.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import panel as pn
from panel.io.state import set_curdoc

from dashboard.data_store import in_session
from dashboard.shared_run import SharedRun
from dashboard.views import escape, html

log = logging.getLogger(__name__)

FOLDER = "references"          # in the server's runs folder: the references a page may choose besides the two
MAX_LISTED = 100               # references of the folder listed at most (by name)
RESCORED_RUNS = 4              # rescored recordings kept ready in memory (the most recently asked)
ID_DIGITS = 16


@dataclass(frozen=True)
class ReferenceChoice:
    """One reference the server offers: ``id`` (what a page sends), ``name`` (its file name) and
    ``description`` (what it was trained on), both outside text; ``origin`` (where the server found
    it); ``path`` (the server's own: never sent to a page); ``problem`` ('' when it can be read)."""

    id: str
    name: str
    origin: str
    description: str = ""
    path: Path = field(default=Path(), repr=False)
    problem: str = ""

    @property
    def label(self) -> str:
        """How the select names it (plain text: the page shows it as text, not markup)."""
        return f"{self.name} · {self.origin}" + (" · cannot be read" if self.problem else "")


def reference_choice(path: Path, origin: str) -> ReferenceChoice:
    """The entry of the reference at ``path``, read from its ``.json`` alone (nothing is loaded)."""
    from pipeline.reference_store import describe_file, reference_digest

    path = Path(path).with_suffix(".npz")
    try:
        digest, description = reference_digest(path), describe_file(path)
    except ValueError as err:
        made = hashlib.sha256(str(path).encode()).hexdigest()[:ID_DIGITS - 2]
        return ReferenceChoice(f"x-{made}", path.name, origin, "", path, str(err))
    return ReferenceChoice(digest[:ID_DIGITS], path.name, origin, description, path)


def reference_id(report: dict) -> str:
    """The id of the reference that scored a run (its report's), as :class:`ReferenceChoice` has it."""
    return str(((report.get("reference") or {}).get("file") or {}).get("sha256") or "")[:ID_DIGITS]


class References:
    """One server's references (:meth:`available`, :meth:`choose`) and the recordings rescored
    with them (:meth:`rescored`), shared by its sessions.

    ``folder``: where the server looks for references of its users; ``started_with``: the
    reference of the server's arguments, if any; ``finish(shared)``: what the server adds to a
    rescored recording's shared data (a board's own data)."""

    def __init__(self, folder: Path | None, started_with: str | None = None,
                 finish: Callable[[SharedRun], None] | None = None):
        self.folder = Path(folder) if folder is not None else None
        self.started_with = started_with
        self._finish = finish
        self._lock = threading.Lock()
        self._busy: dict[tuple, threading.Lock] = {}
        self._runs: OrderedDict[tuple, SharedRun] = OrderedDict()

    def available(self) -> list[ReferenceChoice]:
        """The references a page may choose, the shipped one first, each once (by content)."""
        from pipeline.reference_store import DEFAULT_REFERENCE

        candidates = [(DEFAULT_REFERENCE, "shipped with the package")]
        if self.started_with:
            candidates.append((Path(self.started_with), "the server's --reference"))
        candidates += [(path, f"{FOLDER}/ folder") for path in self._folder_files()]
        choices, seen = [], set()
        for path, origin in candidates:
            choice = reference_choice(path, origin)
            if choice.id not in seen:
                seen.add(choice.id)
                choices.append(choice)
        return choices

    def _folder_files(self) -> list[Path]:
        if self.folder is None:
            return []
        try:
            entries = sorted(os.scandir(self.folder), key=lambda entry: entry.name)
        except OSError:               # no such folder (yet): no references of the users
            return []
        return [Path(entry.path) for entry in entries
                if entry.name.endswith(".npz") and not entry.name.startswith(".") and entry.is_file()][:MAX_LISTED]

    def choose(self, choice_id) -> ReferenceChoice:
        """The reference of ``available()`` whose id is ``choice_id`` (what a page sent). Raises
        ValueError for anything else: no value a page sends names a file."""
        choices = self.available()
        for choice in choices:
            if isinstance(choice_id, str) and choice.id == choice_id:
                return choice
        shown = str(choice_id)[:40]
        raise ValueError(f"no reference {shown!r} among the {len(choices)} this server offers; "
                         "choose one of the list")

    def rescored(self, base: SharedRun, choice: ReferenceChoice) -> SharedRun:
        """``base``'s recording scored against ``choice``: ``base`` itself when that reference
        scored it, else its rescored run (read from the cache when written before, else computed
        and written; :func:`pipeline.rescore.rescore_run`). Raises ValueError, in words, when the
        reference cannot be read."""
        from pipeline.reference_store import load_reference
        from pipeline.rescore import rescore_run

        if choice.problem:
            raise ValueError(choice.problem)
        # Read and checked now (once while the file is unchanged): it may have changed since it was
        # listed, and a damaged file is said so even when its rescored run is in memory.
        digest = load_reference(choice.path).meta["file"]["sha256"]
        if digest[:ID_DIGITS] == reference_id(base.report):
            return base
        key = (str(base.run.path), digest)
        with self._lock:
            busy = self._busy.setdefault(key, threading.Lock())
        with busy:                                   # one rescoring of a recording and reference at a time
            with self._lock:
                if key in self._runs:
                    self._runs.move_to_end(key)
                    return self._runs[key]
            try:
                shared = base.rescored(rescore_run(base.run.path, choice.path))
                if self._finish is not None:
                    self._finish(shared)
                with self._lock:
                    self._runs[key] = shared
                    while len(self._runs) > RESCORED_RUNS:
                        self._runs.popitem(last=False)
            finally:
                with self._lock:
                    self._busy.pop(key, None)
        return shared


_SERVERS: dict[tuple, References] = {}
_SERVERS_LOCK = threading.Lock()


def server_references(settings, finish: Callable[[SharedRun], None] | None = None) -> References:
    """The :class:`References` of this server process for its settings (one per process, shared by
    every session): the folder ``references/`` of its runs folder (the archive's, when it shows
    one) and the reference of its arguments."""
    folder = Path(settings.archive or settings.request.out) / FOLDER
    key = (str(folder), settings.request.reference)
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = References(folder, settings.request.reference, finish)
        return _SERVERS[key]


def failure(err: Exception, what: str) -> str:
    """A failed rescoring in words (plain text: escape it where shown); what the page cannot
    explain (not a ValueError) goes to the server's log with its traceback."""
    if not isinstance(err, ValueError):
        log.error("ECG dashboard: rescoring failed\n%s", traceback.format_exc())
        err = f"{type(err).__name__}: {err}"
    return f"Could not rescore with {what}: {err}. The scores shown are unchanged."


class ReferencePicker(pn.viewable.Viewer):
    """Under the header's details: the server's references in a select, a button that rescores the
    open recording (``base``, as the server has it) with the chosen one, and a line saying what
    happened. ``current``: the id of the reference that scored what is shown; ``on_rescored(shared,
    choice)``: shows the rescored recording (on the session's thread)."""

    def __init__(self, references: References, base: SharedRun, current: str,
                 on_rescored: Callable[[SharedRun, ReferenceChoice], None], message: str = ""):
        super().__init__()
        self.references, self.base, self.current, self._on_rescored = references, base, current, on_rescored
        options = {choice.label: choice.id for choice in references.available()}
        self.select = pn.widgets.Select(name="Score against the reference", options=options,
                                        value=current if current in options.values() else next(iter(options.values())),
                                        sizing_mode="stretch_width", margin=(4, 6))
        self.button = pn.widgets.Button(name="Rescore", button_type="primary", width=110, margin=(22, 6, 4, 6),
                                        disabled=self.select.value == current)
        self.select.param.watch(lambda event: setattr(self.button, "disabled", event.new == self.current), "value")
        self.button.on_click(lambda _: self.choose(self.select.value))
        known = current in options.values()
        self.status = html(message or ("" if known else "<span class='ecg-muted'>The reference that scored this "
                                       "run is not among this server's.</span>"), margin=(0, 6))

    def choose(self, choice_id) -> None:
        """Rescore with the server's reference ``choice_id`` (an id of ``references.available()``;
        anything else a page sends is refused in words, and no file is opened): in a thread of its
        own on a served page, the rescored recording then shown by ``on_rescored``. A reference that
        cannot be read is said so here, and nothing shown changes."""
        try:
            choice = self.references.choose(choice_id)
        except ValueError as err:
            self.fail(str(err))
            return
        if choice.id == self.current:
            self.status.object = f"The scores shown are those of <b>{escape(choice.name)}</b> already."
            return
        self.working(f"Rescoring with <b>{escape(choice.name)}</b>: only the reference's part of the score is "
                     "computed again…")
        doc = pn.state.curdoc

        def work() -> Callable[[], None]:
            try:
                shared = self.references.rescored(self.base, choice)
            except Exception as err:
                message = failure(err, choice.name)
                return lambda: self.fail(message)
            return lambda: self._on_rescored(shared, choice)

        if doc is None or doc.session_context is None:      # a page built in-process (tests): at once
            work()()
            return
        schedule = in_session(doc)

        def in_background() -> None:
            then = work()

            def on_session() -> None:
                with set_curdoc(doc):
                    then()
            schedule(on_session)
        threading.Thread(target=in_background, name="ecg-rescore", daemon=True).start()

    def working(self, text: str) -> None:
        """Say what is being done (markup of the code's own) and wait for it."""
        self.status.object = text
        self.button.disabled = self.select.disabled = True

    def fail(self, message: str) -> None:
        """Say why the choice was refused or failed (outside text), and let the page choose again."""
        self.status.object = f"<span style='color:#9b1c1c'>{escape(message)}</span>"
        self.select.disabled = False
        self.button.disabled = self.select.value == self.current

    def __panel__(self):
        return pn.Column(pn.Row(self.select, self.button, sizing_mode="stretch_width"), self.status,
                         sizing_mode="stretch_width")
