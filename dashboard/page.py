"""The dashboard's body: the rows of cards of ``spec.LAYOUT``, each view drawn by the board (the
linked charts) or by its own class (everything else).

See Also
--------
dashboard.spec : the layout and what each view shows.
dashboard.app.App : puts the body on the page, with the sidebar.
"""
from __future__ import annotations

import panel as pn

from dashboard.data_store import DataStore
from dashboard.review import FamiliesView, StripView
from dashboard.spec import LAYOUT, RENDERED_BY_BOARD, STYLESHEET, VIEWS, ViewSpec
from dashboard.views import BeatDetail, DecodedGrid, OutlierTable, SelectionCentre, html

VIEW_CLASSES = {"table": OutlierTable, "beat": BeatDetail, "strip": StripView, "families": FamiliesView,
                "decoded": DecodedGrid, "centre": SelectionCentre}


def card(spec: ViewSpec, body, controls: tuple = ()) -> pn.Column:
    """A titled box around one view; the CSS class ``ecg-view-<name>`` lets tests find it."""
    header = html(f"<div class='ecg-card-title'>{spec.title}</div>"
                  + (f"<div class='ecg-card-help'>{spec.help}</div>" if spec.help else ""), margin=(4, 10, 0, 10))
    return pn.Column(header, *controls, body, sizing_mode="stretch_width",
                     css_classes=["ecg-card", f"ecg-view-{spec.name}"], margin=(6, 6), stylesheets=[STYLESHEET])


def layout(store: DataStore, board) -> tuple[pn.Column, dict]:
    """The dashboard body: LAYOUT's rows of cards; ``board`` draws the linked kinds. A tuple in a
    row becomes one box of tabs, of which only the open one is drawn (dynamic tabs: a new session
    builds and sends less).

    Returns the body and ``{view name: view object}``.
    """
    views: dict = {}

    def one(name: str) -> pn.Column:
        spec = VIEWS[name]
        view = board.chart(spec) if spec.kind in RENDERED_BY_BOARD else VIEW_CLASSES[spec.kind](store, spec)
        views[name] = view
        controls = [store.widget(c, sizing_mode="stretch_width", margin=(2, 10)) for c in spec.controls]
        return card(spec, view, controls)

    rows = []
    for names in LAYOUT:
        cells = [pn.Tabs(*[(VIEWS[n].tab or VIEWS[n].title, one(n)) for n in name], dynamic=True,
                         sizing_mode="stretch_width", margin=(6, 6), css_classes=["ecg-tabs"])
                 if isinstance(name, tuple) else one(name) for name in names]
        rows.append(pn.Row(*cells, sizing_mode="stretch_width") if len(cells) > 1 else cells[0])
    return pn.Column(*rows, *board.extras(), sizing_mode="stretch_width", css_classes=["ecg-dashboard"]), views
