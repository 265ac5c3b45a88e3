"""The cross-filtered dashboard: ``panel serve dashboard/app.py`` (or ``./run.sh``).

startup.py       server arguments, the one pipeline run per server process, its progress
data_store.py    SharedRun (read-only data of the run) and DataStore (one browser session's selections)
views.py         the views described once, and the renderer-independent ones (table, decoded beats, status)
holoviews_board  renders the charts with HoloViews link_selections + Datashader (pandas; the CPU default)
cuxfilter_board  renders them with cuxfilter over cuDF (GPU)
app.py           App: progress view, then the dashboard; ``.servable()``
"""
