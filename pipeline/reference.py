"""The reference population of normal beats, and the calibrated outlier score it gives every beat.

Each recording's VAE ranks its beats well, but its scores share no scale with another
recording's, and what is common in a recording (bigeminy, frequent atrial premature beats) is
never an outlier in it. The reference answers both with three statistics per beat, each
calibrated against normal beats of other people (:mod:`pipeline.calibrate`):

- **shape**: the squared distance of the beat to its recording's *normal* template, over the
  median of that distance among the recording's normal beats. The reference model decides which
  beats are normal: the half of each block of ``block_beats`` beats nearest the population's
  normal beats (``centroids``, k-means centres of normal beats of many recordings), refined once
  by their distance to their own median. So a recording whose majority is ventricular still has
  a normal template, and its ventricular beats stay far from it.
- **rhythm**: :func:`pipeline.rhythm.rhythm_score` (robust z of the RR before and after the beat,
  relative to the local median RR over ``rhythm_half_window`` beats on each side).
- **population**: the squared distance to the nearest population centroid (how unlike anyone's
  normal beat the beat is); by default it weighs nothing in the score and only picks the normal
  template, because normal beats differ between people more than ectopic beats differ from
  normal ones within a person.

Beats are compared at one rate: the product's rows (``embed.embed_beats``: fiducial at column
``pre``, divided by the recording's median peak-to-peak amplitude) are resampled to ``fs``
(250 Hz: 256 samples over 1.024 s, fiducial at column 64) by one band-limited interpolation
matrix, so recordings at 128-1000 Hz give the same rows and run directories (``embeddings.npy``)
can train a reference without their signal. Every step is array code on the input's device
(NumPy or CuPy); no PyTorch.

The parts live in modules of their own (below); every public name of theirs is found here too.

See Also
--------
pipeline.reference_store : the reference's settings, arrays and files (save, load, digest, describe).
pipeline.reference_score : resampling, the statistics and the calibrated score of a recording's beats.
pipeline.reference_training : training a reference from annotated runs.
pipeline.embed.embed_beats : the rows scored here (the previous step).
pipeline.calibrate : tail tables, the combined score, the outlier threshold, explanations.
pipeline.tables.beats_table : stores the calibrated score and its components (the next step).
"""
from pipeline.reference_score import (DISTANCE_FLOOR_PER_SAMPLE, ReferenceScores, block_edges,
                                      population_distance, reference_statistics, resample_rows, score_reference,
                                      template_distance)
from pipeline.reference_store import (COMPONENTS, DEFAULT_REFERENCE, REFERENCE_DIR, Reference,
                                      ReferenceConfig, describe, describe_file, load_reference, reference_digest,
                                      save_reference)
from pipeline.reference_training import (NORMAL_SYMBOLS, ReferenceBeats, fit_reference, reference_beats,
                                         train_reference)

__all__ = [
    "COMPONENTS", "DEFAULT_REFERENCE", "DISTANCE_FLOOR_PER_SAMPLE", "NORMAL_SYMBOLS", "REFERENCE_DIR", "Reference",
    "ReferenceBeats", "ReferenceConfig", "ReferenceScores", "block_edges", "describe", "describe_file",
    "fit_reference", "load_reference", "population_distance", "reference_beats", "reference_digest",
    "reference_statistics", "resample_rows", "save_reference", "score_reference", "template_distance",
    "train_reference",
]
