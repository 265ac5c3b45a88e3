"""The cross-filtered dashboard: ``panel serve dashboard/app.py`` (or ``./run.sh``).

settings.py       the server's arguments (or ECG_* variables), read once into Settings
startup.py        the one pipeline run per server process, its progress
pipeline_process  that run computed in a child process, started before Panel is imported
announcement.py   an event set by background work (the run's end, Datashader compiled) that also calls back
data_store.py     SharedRun (read-only data of the run, on its device) and DataStore (one session's selections)
spec.py           the views described once (what, which columns, which links, where), colours, formats
bins.py           bin indexes of the linked charts, computed once per run
shading.py        counts per pixel as opacity bytes, and the colour mapper that draws them in the page
signal_raster.py  levels of detail of the recording and their Datashader rasters
charts.py         the linked charts drawn straight into Bokeh (the default board)
cuxfilter_board   the same linked charts drawn by cuxfilter over cuDF (GPU runs, on request)
views.py          the views every board shares (table, beat, decoded grid, centre, summary) and the layout
app.py            App: progress view, then the dashboard; ``.servable()``
"""
