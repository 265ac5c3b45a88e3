"""What the server tests and the benchmarks both drive, kept once: the dashboard served in a
subprocess (:mod:`tests.support.served`) and sessions over the Bokeh protocol
(:mod:`tests.support.bokeh_session`). Imported as ``tests.support`` (the repository root on the
path: pytest's ``pythonpath``, ``python -m`` from the root); pytest collects nothing here.
"""
