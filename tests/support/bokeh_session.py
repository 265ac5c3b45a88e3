"""Dashboard sessions driven over the Bokeh websocket protocol, without a browser.

:class:`ProtocolSession` speaks the protocol that ``bokeh.client`` speaks (the same
``bokeh.protocol`` messages over a tornado websocket: ACK, PULL-DOC-REQ/REPLY, PATCH-DOC), but in
an asyncio task of its own, so that one process can hold many concurrent sessions (the load test),
open and close hundreds of them (the soak test), give every incoming message a timestamp and stop
waiting after a timeout. ``bokeh.client.ClientSession`` runs a blocking loop that only returns
when a message arrives, which allows none of that.

A session changes the dashboard the way a browser does: it sets model properties in its copy of
the document and sends them as one PATCH-DOC (a brush is ``Brush.bounds``, a zoom the recording's
``x_range`` start and end together), or it sends a UI event (``document_ready`` after the pull,
as BokehJS does once the page has rendered; a box selection's ``selectiongeometry`` for charts
whose brush the server reads from that event, such as cuxfilter's).

See Also
--------
tests.support.served : the server these sessions connect to.
benchmarks.many_sessions : the load test and the soak test that use them.
"""
from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable

from bokeh.core.serialization import Serializable
from bokeh.document import Document
from bokeh.document.events import MessageSentEvent
from bokeh.events import DocumentReady, Reset, SelectionGeometry
from bokeh.models import Plot
from bokeh.protocol import Protocol
from bokeh.protocol.receiver import Receiver
from bokeh.util.token import generate_jwt_token, generate_session_id

BRUSH_TYPE = "dashboard.charts.Brush"
DASHBOARD_MARKER = "ecg-version"      # a model of the dashboard (the selection version it shows)
MAX_MESSAGE = 200 * 1024 * 1024


def websocket_url(page_url: str) -> str:
    """``http://host:port/app`` → ``ws://host:port/app/ws``."""
    if not page_url.startswith("http://"):
        raise ValueError(f"expected an http:// page URL; got {page_url!r}")
    return "ws://" + page_url[len("http://"):].rstrip("/") + "/ws"


@dataclass
class Arrival:
    """One message from the server: when it arrived (perf_counter), its type and size."""

    at: float
    msgtype: str
    nbytes: int


@dataclass
class Waited:
    """What :meth:`ProtocolSession.wait_for` saw: when the condition first held (the arrival time of
    the patch that made it true), the last patch before the server went quiet, and how many patches
    and bytes came in between. An arrival's time is when this process read it: a patch read while
    the previous one was still being applied gets that delay too."""

    satisfied_at: float
    last_at: float
    messages: int
    nbytes: int


class SessionError(RuntimeError):
    pass


@dataclass(eq=False)
class ProtocolSession:
    """One dashboard session over the Bokeh protocol (see the module's docstring)."""

    url: str
    doc: Document = field(default_factory=Document)
    arrivals: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    # Seconds this process spent turning the server's messages into its document (the pull and every
    # patch applied): the work a browser does in BokehJS, here done in Python by the stand-in.
    decode_s: float = 0.0

    def __post_init__(self):
        self.protocol = Protocol()
        self._socket = None
        self._reader: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._pending: list = []
        self._brushes: dict = {}
        self._pictures: list = []      # (picture source, its Arrival) of each zoomable view
        self._deferred: list | None = None      # the server's patches read and not applied yet
        self._version: str | None = None        # the version marker's text as the last of them set it
        self._marker_id: str | None = None      # the version marker's model id, which those patches name
        self.doc.on_change(self._collect)

    # ------------------------------------------------------------------ open and close
    async def open(self, timeout: float = 120.0) -> dict:
        """Connect (the server builds the session's page), pull the document, tell the server the
        page is ready, and wait for the dashboard (a page is sent with a line saying it is being
        built, and the dashboard follows as soon as the page is ready; see
        ``dashboard.app.App._build_once_shown``). Returns seconds: ``connect_s`` (websocket + ACK),
        ``pull_s`` (the pull), ``total_s`` (until the document holds the dashboard), and the
        pulled document's ``models`` and ``bytes``."""
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        from bokeh.client.websocket import WebSocketClientConnectionWrapper

        from tests.support.served import register_panel_models

        register_panel_models()                 # the document's Panel and dashboard model types
        started = time.perf_counter()
        session_id = generate_session_id()
        socket = await asyncio.wait_for(websocket_connect(
            HTTPRequest(websocket_url(self.url), connect_timeout=timeout, request_timeout=timeout),
            subprotocols=["bokeh", generate_jwt_token(session_id)], max_message_size=MAX_MESSAGE), timeout)
        # As a browser does: a message's frames (header, metadata, content, buffers) go out at once.
        # With Nagle's algorithm on, all but the first waited for the server's delayed
        # acknowledgement, which every interaction's time then included.
        socket.protocol.set_nodelay(True)
        self._socket = WebSocketClientConnectionWrapper(socket)
        self._receiver = Receiver(self.protocol)
        ack, _ = await asyncio.wait_for(self._read(), timeout)
        if ack is None or ack.msgtype != "ACK":
            raise SessionError(f"expected ACK from the server, got {ack and ack.msgtype}")
        connected = time.perf_counter()
        request = self.protocol.create("PULL-DOC-REQ")
        await request.send(self._socket)
        while True:
            reply, nbytes = await asyncio.wait_for(self._read(), timeout)
            if reply is None:
                raise SessionError("the server closed the connection during the pull")
            if reply.header.get("reqid") == request.header["msgid"]:
                break
        if reply.msgtype == "ERROR":
            raise SessionError(f"pull failed: {reply.content.get('text')}")
        received = time.perf_counter()
        reply.push_to_document(self.doc)
        pulled = time.perf_counter()
        self.decode_s += pulled - received
        models = len(self.doc.models)
        self._reader = asyncio.create_task(self._read_forever())
        await self.send_event(DocumentReady())
        shown = (await self.wait_for(lambda: self.doc.get_model_by_name(DASHBOARD_MARKER) is not None, pulled,
                                     timeout, quiet=0.0)).satisfied_at
        return {"connect_s": connected - started, "pull_s": pulled - connected, "total_s": shown - started,
                "models": models, "bytes": nbytes}

    async def close(self) -> None:
        if self._socket is not None:
            self._socket.close(1000, "done")
            self._socket = None
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
            self._reader = None

    # ------------------------------------------------------------------ messages
    async def _read(self):
        """The next whole message and its size in bytes, or (None, 0) once the socket closed."""
        nbytes = 0
        while True:
            fragment = await self._socket.read_message()
            if fragment is None:
                return None, nbytes
            nbytes += len(fragment)
            message = await self._receiver.consume(fragment)
            if message is not None:
                return message, nbytes

    async def _read_forever(self) -> None:
        while self._socket is not None:
            try:
                message, nbytes = await self._read()
            except Exception as err:   # noqa: BLE001 - a broken message is an error of the run, not a crash
                self.errors.append(f"read: {type(err).__name__}: {err}")
                break
            now = time.perf_counter()
            if message is None:
                break
            self.arrivals.append(Arrival(now, message.msgtype, nbytes))
            if message.msgtype == "PATCH-DOC" and self._deferred is not None:
                self._note_version(message)
                self._deferred.append(message)
            elif message.msgtype == "PATCH-DOC":
                self._apply(message)
                await self._acknowledge_pictures()
            elif message.msgtype == "ERROR":
                self.errors.append(f"server: {message.content.get('text')}")
            self._changed.set()
        self._changed.set()

    def _apply(self, message) -> None:
        started = time.perf_counter()
        try:
            message.apply_to_document(self.doc, self)
        except Exception as err:   # noqa: BLE001
            self.errors.append(f"patch: {type(err).__name__}: {err}")
        self.decode_s += time.perf_counter() - started

    async def _acknowledge_pictures(self) -> None:
        """What the page's script does when a new picture of a zoomable view arrives: report its
        number (``dashboard.charts.RangeWatch`` draws the next window once the last one arrived)."""
        if not self._pictures:      # (the dashboard replaces the page that says it is being built)
            self._pictures = [(model, callback.args["arrival"]) for model in self.doc.models
                              for callback in model.js_property_callbacks.get("change:data", ())
                              if "arrival" in getattr(callback, "args", {})]
        late = [(arrival, source.data["picture"][0]) for source, arrival in self._pictures
                if "picture" in source.data and arrival.picture != source.data["picture"][0]]
        if late:
            async with self.change():
                for arrival, picture in late:
                    arrival.picture = picture

    def defer_patches(self) -> None:
        """Keep the server's patches from now on without applying them, until :meth:`apply_deferred`;
        :attr:`version` still follows them. For the load test: applying one of a brush's patches to
        a Python document costs ~4 ms on two cores, and one process that applies twenty sessions'
        patches as they come delays its reading of the others' answers by its own queue, which a
        browser per user does not. The document is stale meanwhile, except for our own changes."""
        self._version = self.version
        self._marker_id = self.by_name(DASHBOARD_MARKER).id
        self._deferred = []

    def apply_deferred(self) -> None:
        """Apply the patches kept since :meth:`defer_patches`, in order, and apply them as they come again."""
        deferred, self._deferred = self._deferred or [], None
        for message in deferred:
            self._apply(message)

    def _note_version(self, message) -> None:
        for event in message.content.get("events", []):
            if (event.get("kind") == "ModelChanged" and event.get("attr") == "text"
                    and event.get("model", {}).get("id") == self._marker_id):
                self._version = event["new"]

    def _collect(self, event) -> None:
        """Our own changes to the document (not the server's patches, whose setter is us)."""
        if getattr(event, "setter", None) is not self:
            self._pending.append(event)

    @contextlib.asynccontextmanager
    async def change(self):
        """Properties set inside go to the server as one PATCH-DOC (as one browser gesture does)."""
        self._pending.clear()
        yield
        events, self._pending = list(self._pending), []
        if events:
            await self.protocol.create("PATCH-DOC", events).send(self._socket)

    async def send_event(self, event) -> None:
        """A UI event (``bokeh.events``) to the server, as BokehJS sends it."""
        message = self.protocol.create("PATCH-DOC", [MessageSentEvent(self.doc, "bokeh_event", event)])
        await message.send(self._socket)

    async def wait_for(self, condition: Callable[[], bool], since: float, timeout: float,
                       quiet: float = 0.25) -> Waited:
        """Wait until ``condition()`` holds on the document, then until no message has come for
        ``quiet`` seconds. Counts the messages that arrived after ``since`` (perf_counter)."""
        deadline = time.perf_counter() + timeout
        satisfied = None
        while True:
            patches = self.patches_since(since)
            if satisfied is None and condition():
                satisfied = patches[-1].at if patches else time.perf_counter()
            if satisfied is not None:
                last = patches[-1].at if patches else satisfied
                if time.perf_counter() - max(last, satisfied) >= quiet:
                    break
            left = deadline - time.perf_counter()
            if left <= 0:
                raise SessionError(f"no answer within {timeout:.0f} s" if satisfied is None
                                   else f"the server did not go quiet within {timeout:.0f} s")
            if self._reader is None or self._reader.done():
                raise SessionError("the connection closed: " + "; ".join(self.errors[-3:]))
            self._changed.clear()
            wait = left if satisfied is None else min(left, quiet)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
        patches = self.patches_since(since)
        return Waited(satisfied, max(satisfied, patches[-1].at if patches else satisfied), len(patches),
                      sum(a.nbytes for a in patches))

    def patches_since(self, since: float) -> list[Arrival]:
        """The document patches that arrived after ``since`` (not the server's OK replies to ours)."""
        return [a for a in self.arrivals if a.at >= since and a.msgtype == "PATCH-DOC"]

    # ------------------------------------------------------------------ the dashboard's models
    def by_name(self, name: str):
        model = self.doc.get_model_by_name(name)
        if model is None:
            raise SessionError(f"no model named {name!r} in the session's document (is the dashboard ready?)")
        return model

    @property
    def version(self) -> str:
        if self._deferred is not None:
            return self._version
        return self.by_name(DASHBOARD_MARKER).text

    def card(self, view: str):
        """The Panel column of the card ``ecg-view-<view>``."""
        for model in self.doc.models:
            if f"ecg-view-{view}" in (getattr(model, "css_classes", None) or []):
                return model
        raise SessionError(f"no card 'ecg-view-{view}' in the session's document")

    def plot(self, view: str):
        """The first Bokeh plot inside a view's card."""
        plots = [m for m in self.card(view).references() if isinstance(m, Plot)]
        if not plots:
            raise SessionError(f"no plot in the card 'ecg-view-{view}'")
        return plots[0]

    def brush_model(self, view: str):
        """The ``Brush`` a linked chart of the default board reports its box selection to. Looked up
        once per view: finding it walks the document's models (13 ms on two cores), and in the load
        test every session's lookup held up the other sessions' answers in this one process."""
        if view not in self._brushes:
            self._brushes[view] = self._find_brush(view)
        return self._brushes[view]

    def _find_brush(self, view: str):
        for model in self.plot(view).references():
            if model.__qualified_model__ == BRUSH_TYPE:
                return model
        raise SessionError(f"the chart 'ecg-view-{view}' has no {BRUSH_TYPE} (is this the cuxfilter board?)")

    def selection_geometry(self, view: str, x: tuple[float, float], y: tuple[float, float]) -> "PlotEvent":
        """The event a finished box selection on a view's plot sends (data units)."""
        geometry = {"type": "rect", "x0": x[0], "x1": x[1], "y0": y[0], "y1": y[1]}
        return PlotEvent(SelectionGeometry.event_name, self.plot(view), geometry=geometry, final=True)

    def reset(self, view: str) -> "PlotEvent":
        """The event of a view's reset tool."""
        return PlotEvent(Reset.event_name, self.plot(view))


class PlotEvent(Serializable):
    """A UI event on a plot as BokehJS sends it: its name, a reference to the plot, its values.

    ``bokeh.events.SelectionGeometry`` serializes only its model (a geometry is decoded from the
    browser, never sent from Python), so a server would receive a box without coordinates; and a
    model in an event's values is sent here as a reference, not serialized whole."""

    def __init__(self, name: str, plot, **values):
        self.name, self.plot, self.values = name, plot, values

    def to_serializable(self, serializer):
        return {"type": "event", "name": self.name,
                "values": {"model": {"id": self.plot.id}, **{k: serializer.encode(v) for k, v in self.values.items()}}}
