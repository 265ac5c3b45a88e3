"""The stages of a run, in the order they run, with the words a progress bar shows for each: the
one list of their names. The conductor times and reports them (:mod:`pipeline.run`); the command
line's progress bars, the batch's bar, the archive's time columns (:mod:`pipeline.archive`) and
the dashboard's progress (:mod:`dashboard.startup`) read them here. It imports nothing.

See Also
--------
pipeline.run.run_pipeline : reports each stage to its ``progress`` callback and its time in the
    run's ``report.json`` (``stages_s``).
"""
from __future__ import annotations

STAGES = {
    "synth": "Synthesising the default recording",
    "hash": "Hashing the input",
    "setup": "Setting up threads and GPU memory",
    "warmup": "Compiling kernels",
    "load": "Loading",
    "wavelet": "Ricker response",
    "peaks": "Non-maximum suppression",
    "lengths": "Beat lengths",
    "embed": "Pruning and embedding",
    "train": "Training the VAE",
    "score": "Scoring beats",
    "families": "Grouping beats into families",
    "results": "Writing results",
}
# The stages whose times add up to the report's ``segmentation_s``.
SEGMENTATION = ("wavelet", "peaks", "lengths", "embed")
# The stages a run found in the cache reports (after "synth", for the synthetic default): any
# other stage means that the run is being computed.
CACHED = ("hash", "results")
# The stages with a time column in a batch's archive (``time_<stage>_s``): all but "synth" (a
# batch's inputs are files) and "families" (its time is in each run's report.json only).
ARCHIVED = tuple(stage for stage in STAGES if stage not in ("synth", "families"))
