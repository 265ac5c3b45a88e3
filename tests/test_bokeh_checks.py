"""Bokeh's validation, switched off in one place (dashboard/bokeh_checks.py): per session's document
for the process, per property value only inside a patch."""
from bokeh.core.property.bases import Property
from bokeh.settings import settings

from dashboard import bokeh_checks


def test_property_values_are_unchecked_only_inside_the_block():
    assert Property._should_validate
    with bokeh_checks.unchecked():
        assert not Property._should_validate
    assert Property._should_validate


def test_documents_are_not_validated_once_skipped():
    before = settings.perform_document_validation()
    try:
        bokeh_checks.skip_document_checks()
        assert settings.perform_document_validation() is False
    finally:
        settings.perform_document_validation.set_value(before)
