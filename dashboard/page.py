"""The dashboard's body: the rows of cards of ``spec.LAYOUT``, each view drawn by the board (the
linked charts) or by its own class (everything else).

See Also
--------
dashboard.spec : the layout and what each view shows.
dashboard.app.App : puts the body on the page, with the sidebar.
"""
from __future__ import annotations

from typing import Callable

import panel as pn

from dashboard.data_store import DataStore
from dashboard.review import FamiliesView, StripView
from dashboard.spec import LAYOUT, RENDERED_BY_BOARD, STYLESHEET, VIEWS, ViewSpec
from dashboard.views import BeatDetail, DecodedGrid, OutlierTable, SelectionCentre, html

VIEW_CLASSES = {"table": OutlierTable, "beat": BeatDetail, "strip": StripView, "families": FamiliesView,
                "decoded": DecodedGrid, "centre": SelectionCentre}


def share(spec: ViewSpec) -> dict:
    """The CSS that gives a box of a row its part of the row's width (``spec.share``)."""
    return {"flex": f"{spec.share:g} 1 0px", "min-width": "0px"}


def card(spec: ViewSpec, body, controls: tuple = ()) -> pn.Column:
    """A titled box around one view; the CSS class ``ecg-view-<name>`` lets tests find it."""
    header = html(f"<div class='ecg-card-title'>{spec.title}</div>"
                  + (f"<div class='ecg-card-help'>{spec.help}</div>" if spec.help else ""), margin=(4, 10, 0, 10))
    return pn.Column(header, *controls, body, sizing_mode="stretch_width",
                     css_classes=["ecg-card", f"ecg-view-{spec.name}"], margin=(6, 6), stylesheets=[STYLESHEET])


class Deferred(pn.viewable.Viewer):
    """A view built the first time it is shown or used. The views behind closed tabs then cost a
    new session nothing (~0.1 s of the ~0.9 s a session took to build on two cores) and follow
    no selection until someone opens them. Attributes it lacks are the view's (building it)."""

    def __init__(self, build: Callable[[], object]):
        super().__init__()
        self._build, self._view = build, None

    @property
    def view(self):
        if self._view is None:
            self._view = self._build()
        return self._view

    def __panel__(self):
        # Panel asks a layout's Viewers for their contents as soon as they join it; a lazy function
        # pane is evaluated only when drawn (dynamic tabs draw the open tab).
        return pn.param.ParamFunction(lambda: self.view, lazy=True, sizing_mode="stretch_width")

    def __getattr__(self, name: str):
        if name.startswith("_"):     # the wrapper's own (param probes them while it is made)
            raise AttributeError(name)
        return getattr(self.view, name)


def layout(store: DataStore, board) -> tuple[pn.Column, dict]:
    """The dashboard body: LAYOUT's rows of cards; ``board`` draws the linked kinds. A tuple in a
    row becomes one box of tabs, of which only the open one is built and drawn (dynamic tabs and
    :class:`Deferred` views: a new session builds and sends less).

    Returns the body and ``{view name: view object}``.
    """
    views: dict = {}

    def one(name: str, deferred: bool = False) -> pn.Column:
        spec = VIEWS[name]
        if spec.kind in RENDERED_BY_BOARD:
            view = board.chart(spec)
        else:
            view = Deferred(lambda: VIEW_CLASSES[spec.kind](store, spec)) if deferred else \
                VIEW_CLASSES[spec.kind](store, spec)
        views[name] = view
        controls = [store.widget(c, sizing_mode="stretch_width", margin=(2, 10)) for c in spec.controls]
        return card(spec, view, controls)

    rows = []
    for names in LAYOUT:
        cells = [pn.Tabs(*[(VIEWS[n].tab or VIEWS[n].title, one(n, deferred=k > 0)) for k, n in enumerate(name)],
                         dynamic=True, sizing_mode="stretch_width", margin=(6, 6), css_classes=["ecg-tabs"])
                 if isinstance(name, tuple) else one(name) for name in names]
        if len(cells) > 1:
            for cell, name in zip(cells, names):
                cell.styles = share(VIEWS[name[0] if isinstance(name, tuple) else name])
        rows.append(pn.Row(*cells, sizing_mode="stretch_width") if len(cells) > 1 else cells[0])
    return pn.Column(*rows, *board.extras(), sizing_mode="stretch_width", css_classes=["ecg-dashboard"]), views
