"""Bokeh's validation, which the dashboard switches off, in one place: what is skipped, where,
and what checks it instead.

- **Each new session's document**, model by model (``settings.perform_document_validation``):
  ~80 ms of a ~0.9 s session on two cores, and Bokeh only logs what it finds. The page's integrity
  is a test's job instead: tests/test_dashboard.py runs Bokeh's ``check_integrity`` on a whole
  page. Off for the whole process, from the app's import (:func:`skip_document_checks`).
- **Property values the server sets inside one patch** (:func:`unchecked`, which
  :func:`dashboard.data_store.one_patch` enters): Bokeh checks every element of a list-like value,
  which costs more than computing the arrays the views hand it. Only inside the block, so that
  what a page sends is still validated.
"""
from __future__ import annotations

import contextlib


def skip_document_checks() -> None:
    """No validation of a new session's document, from now on in this process."""
    from bokeh.settings import settings

    settings.perform_document_validation.set_value(False)


@contextlib.contextmanager
def unchecked():
    """Property values set inside the block are not validated."""
    from bokeh.core.property.validation import validate

    with validate(False):
        yield
