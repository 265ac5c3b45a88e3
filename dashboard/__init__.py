"""The cross-filtered dashboard: ``panel serve dashboard/app.py`` (or ``./run.sh``).

serve.py          the server's entry (python -m dashboard.serve, what ./run.sh starts)
settings.py       the server's arguments (or ECG_* variables), read once into Settings
startup.py        the one pipeline run per server process, its progress
pipeline_process  that run computed in a child process, started before Panel is imported
announcement.py   an event set by background work (the run's end, Datashader compiled) that also calls back
shared_run.py     SharedRun: the read-only data of the run (beats, columns on its device, the VAE, a memo)
data_store.py     DataStore: one session's selections over it, one immutable Selection per change
reference_choice  the references a page may rescore its recording with (the server's list), the rescored runs
spec.py           the views described once (what, which columns, which links, where), colours, formats
bins.py           bin indexes of the linked charts, computed once per run
shading.py        counts per pixel as opacity bytes, and the colour mapper that draws them in the page
signal_raster.py  levels of detail of the recording and their Datashader rasters
figures.py        figure helpers the boards and views share (look, renderers, boxes, ranges, version marker)
beat_colours.py   the colour a beat takes in an image (score palette, classes of labels, families)
range_watch.py    a zoomable view's pictures, one at a time: each waits until the browser took the last
recording_view    the recording (raster, leads), the tachogram, their markers and episode bands (both boards)
charts.py         the linked charts drawn straight into Bokeh, and the default board that holds them
cuxfilter_board   the same linked charts drawn by cuxfilter over cuDF (GPU runs, on request)
views.py          the views every board shares (table, beat, decoded grid, centre, summary) and the layout
review.py         the analyst's tools: beat families, the strip at paper speed, the label panel
events.py         the run's episodes as a list with the reviewer's verdicts (episode_review.py keeps them)
page.py           the dashboard's body: the cards of spec.LAYOUT; views behind closed tabs built when opened
archive.py        a batch's recordings as a table to pick from
labels.py         ReviewLabels: the reviewer's beat labels of a recording, shared by sessions and servers
labels_file.py    their SQLite file: schema, transactions, the folder lock, damaged files moved aside
label_exports.py  the labels as WFDB annotations, CSV (formula-safe cells) or Parquet
app.py            App: progress view, then the dashboard; ``.servable()``
waiting.py        the progress view and the error page, shown before the dashboard
server_gc.py      the server's garbage-collector policy: pauses, freezes, thresholds, a collection after sessions end
bokeh_checks.py   Bokeh's validation the server skips (each session's document; property values inside a patch)
command.py        the installed `ecg` command
"""
