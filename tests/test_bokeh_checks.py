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


def test_the_bokeh_shims_were_written_for_the_installed_bokeh():
    """dashboard/assets/bokeh_speedups.js patches BokehJS 3.6's internals (it switches itself off, with a
    console error, on any other BokehJS) and this module switches off Bokeh 3.6's validation. A
    Bokeh upgrade must fail here first: re-measure each shim with the interaction benchmark
    (with and without it, interleaved) and rewrite or remove it before changing this version."""
    import bokeh

    from dashboard.spec import ASSETS

    assert bokeh.__version__.startswith("3.6."), (
        f"Bokeh {bokeh.__version__}: the dashboard's Bokeh shims (dashboard/assets/bokeh_speedups.js, "
        "dashboard/bokeh_checks.py) were written for Bokeh 3.6")
    assert 'startsWith("3.6.")' in (ASSETS / "bokeh_speedups.js").read_text()
