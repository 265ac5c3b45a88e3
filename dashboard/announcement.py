"""An event that background work sets once and that sessions may also ask to be called back on.

The pipeline job's end and Datashader's compilation happen in threads of their own; a page waits
for the first, a recording view for the second. :class:`Announcement` is a ``threading.Event``
(``wait``, ``is_set``) with :meth:`~Announcement.then`. A callback that must reach a session's
document goes through :func:`dashboard.data_store.in_session`.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable


class Announcement(threading.Event):
    """``then(callback)`` runs ``callback()`` once the event is set: from the thread that sets it,
    or at once, from the caller's, if it is set already. Waiters wake after the callbacks have run.
    A callback that fails is logged and the others still run (a session closed meanwhile must not
    keep the others waiting)."""

    def __init__(self):
        super().__init__()
        self._callbacks_lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] | None = []    # None once announced

    def is_set(self) -> bool:
        """True from the moment the event is announced, while its callbacks still run: work that a
        callback hands to another thread must find it set (a recording view re-rendered from the
        loop in that moment drew its stand-in line again, and kept it for good)."""
        return self._callbacks is None or super().is_set()

    def then(self, callback: Callable[[], None]) -> None:
        with self._callbacks_lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return
        callback()

    def set(self) -> None:
        with self._callbacks_lock:
            callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            try:
                callback()
            except Exception:   # noqa: BLE001 - see the class
                logging.getLogger(__name__).exception("a callback of a background event failed")
        super().set()
