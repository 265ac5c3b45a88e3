"""The picture handshake of a zoomable view: a zoom or pan redraws its picture one at a time, each
waiting until the browser has taken the last (:class:`RangeWatch`, :class:`Arrival`).

See Also
--------
dashboard.recording_view : the recording and tachogram, which zoom and pan together.
dashboard.charts.PlaneChart : the planes, re-binned for the view.
"""
from __future__ import annotations

import time

import numpy as np
import panel as pn
from bokeh.core.properties import Int
from bokeh.model import DataModel
from bokeh.models import ColumnDataSource, CustomJS

from dashboard.data_store import one_patch

ARRIVAL_TIMEOUT_MS = 1000  # a zoom or pan's next picture waits at most this long for the browser to take the last
WINDOW_SETTLE_MS = 250      # the beat views follow the recording's window once it stood still this long


class Arrival(DataModel):
    """The number of the last picture of a view that the browser has applied: the browser sets it
    (``_ARRIVAL_JS``) from the ``picture`` column that the server numbers its pictures by."""

    picture = Int(0)


_ARRIVAL_JS = "arrival.picture = source.data.picture[0];"


class RangeWatch:
    """Runs callbacks once the ranges of a view moved: for a zoom or pan in the browser (which
    reports start and end as separate changes, ~60 times a second while a hand drags) in one patch,
    on the next tick; for a zoom made on the server (:meth:`fire`) at once, inside the caller's patch.

    One picture at a time is on its way to the browser. A window that moves while the browser has
    not yet applied the picture drawn for the last one waits until it has (``picture_source``'s
    data, numbered by :meth:`next_picture`; at most ``ARRIVAL_TIMEOUT_MS``) and is then drawn as it
    stands by then. A picture of the recording is ~330 KB for the browser to take in and paint: drawn
    at the pace of the hand, they queued up and a pan's last one came up to a second after the
    mouse-up on a 2-core CPU; drawn at a fixed interval, a quick browser waited for the clock.

    What follows a window only once it stays (:meth:`when_settled`) waits until the ranges have not
    moved for ``WINDOW_SETTLE_MS`` and no window waits to be drawn."""

    def __init__(self, ranges: list, picture_source: ColumnDataSource):
        self.callbacks: list = []
        self._pending = False
        self._doc = None
        self._sent = 0          # the number of the last picture drawn
        self._awaited = 0       # the last picture drawn for the browser's zooms and pans (0: none awaited)
        self._timeout = None
        self._last_moved = -np.inf      # time.monotonic() of the last change of the ranges
        self._settled = None            # (callback, its timer) waiting for the ranges to stay
        picture_source.data["picture"] = [0]
        self.arrival = Arrival()
        picture_source.js_on_change("data", CustomJS(args=dict(arrival=self.arrival, source=picture_source),
                                                     code=_ARRIVAL_JS))
        self.arrival.on_change("picture", self._arrived)
        for r in ranges:
            r.on_change("start", self._moved)
            r.on_change("end", self._moved)

    def add(self, callback) -> None:
        self.callbacks.append(callback)

    def next_picture(self) -> list[int]:
        """The ``picture`` column of the next picture of the view (every new picture carries one)."""
        self._sent += 1
        return [self._sent]

    @property
    def in_flight(self) -> bool:
        return self._awaited > self.arrival.picture     # (pictures arrive in order)

    def fire(self) -> None:
        self._pending = False
        for callback in self.callbacks:
            callback()

    def when_settled(self, callback) -> None:
        """``callback()``, in one patch, once the ranges have not moved for ``WINDOW_SETTLE_MS`` and
        no window waits to be drawn (at once without a live session); it replaces the callback of
        an earlier call that has not run yet. (Filtering every beat view to a new window sends them
        all anew and repaints every chart: done during a pan, on a 2-core CPU, it held up the
        pictures of the recording that the hand was waiting for.)"""
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:
            callback()
            return
        if self._settled is not None:
            doc.remove_timeout_callback(self._settled[1])
        self._doc = doc
        self._settled = (callback, doc.add_timeout_callback(self._check_settled, WINDOW_SETTLE_MS))

    def _check_settled(self) -> None:
        callback, _ = self._settled
        still_ms = (time.monotonic() - self._last_moved) * 1000
        if self._pending or still_ms < WINDOW_SETTLE_MS:
            wait_ms = max(int(WINDOW_SETTLE_MS - still_ms), 0) + 20
            self._settled = (callback, self._doc.add_timeout_callback(self._check_settled, wait_ms))
            return
        self._settled = None
        with one_patch():
            callback()

    def _moved(self, attr, old, new) -> None:
        self._last_moved = time.monotonic()
        if self._pending:
            return
        doc = pn.state.curdoc
        if doc is None or doc.session_context is None:   # no event loop (tests): at once
            self.fire()
            return
        self._pending, self._doc = True, doc
        if self.in_flight:     # (should its report be lost, the window is drawn after the timeout)
            self._timeout = doc.add_timeout_callback(self._gave_up, ARRIVAL_TIMEOUT_MS)
        else:
            doc.add_next_tick_callback(self._tick)

    def _arrived(self, attr, old, new) -> None:
        if self._pending and not self.in_flight and self._timeout is not None:
            self._doc.remove_timeout_callback(self._timeout)
            self._timeout = None
            self._doc.add_next_tick_callback(self._tick)

    def _gave_up(self) -> None:
        self._awaited = 0
        self._tick()

    def _tick(self) -> None:
        self._timeout = None
        drawn = self._sent
        with one_patch():
            self.fire()
        if self._sent > drawn:
            self._awaited = self._sent
