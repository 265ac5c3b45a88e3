"""Beat families: groups of beats with the same morphology, as Holter review software shows them
(templates with counts, confirmed or relabelled family by family).

The embedded beats are projected on their first principal components (exactly, from their
covariance), cut into many small clusters (scikit-learn's MiniBatchKMeans on those few
numbers), and small clusters whose median beats correlate closely are merged (agglomerative
clustering on the templates' correlation distance): a family is a set of beats whose templates
look alike, however many clusters its spread needed. Families are numbered by size, 0 the largest.

Everything runs on the host: the clustering is scikit-learn's anyway, and the rest is a few
matrix products. That lets a GPU run find the families in a thread beside training
(:func:`pipeline.run.run_pipeline`), which leaves the interpreter and the cores mostly idle.

See Also
--------
pipeline.score.score_beats : the step before.
pipeline.results.write_run : stores ``family`` per beat and the templates.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COMPONENTS = 6             # principal components the clustering sees
MICRO_CLUSTERS = 24        # small clusters before merging
MIN_CORRELATION = 0.95     # templates that correlate at least this much are one family
TEMPLATE_BEATS = 2000      # beats per family a template is computed from at most


@dataclass
class Families:
    """``family`` per beat (int16, 0 = the largest); per family its ``count`` and template: the
    ``median`` beat with the ``lower``/``upper`` quartiles (host arrays, families × width)."""

    family: np.ndarray
    count: np.ndarray
    median: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def find_families(rows: np.ndarray, seed: int = 0, micro_clusters: int = MICRO_CLUSTERS,
                  min_correlation: float = MIN_CORRELATION) -> Families:
    """Group ``rows`` (n, width; a host array) into morphology families."""
    from sklearn.cluster import AgglomerativeClustering, MiniBatchKMeans

    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim != 2 or rows.shape[0] < 2:
        raise ValueError(f"beats must be 2-D with at least 2 rows; got shape {tuple(rows.shape)}")
    n = rows.shape[0]
    features = _principal_components(rows)                          # (n, COMPONENTS)
    k = min(micro_clusters, n)
    micro = MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=3, batch_size=4096).fit_predict(features)
    _, micro = np.unique(micro, return_inverse=True)                 # drop clusters left empty
    k = int(micro.max()) + 1
    templates = np.stack([_template(rows, micro == c, seed)[0] for c in range(k)])
    if k > 1:
        distance = 1.0 - np.nan_to_num(np.corrcoef(templates), nan=0.0)
        merged = AgglomerativeClustering(n_clusters=None, metric="precomputed", linkage="average",
                                         distance_threshold=1.0 - min_correlation).fit_predict(distance)
    else:
        merged = np.zeros(1, dtype=int)
    family = merged[micro]
    by_size = np.argsort(-np.bincount(family), kind="stable")       # renumber: 0 = the largest family
    family = np.argsort(by_size)[family].astype(np.int16)
    stats = [_template(rows, family == f, seed) for f in range(int(family.max()) + 1)]
    return Families(family=family, count=np.bincount(family).astype(np.int64),
                    median=np.stack([s[0] for s in stats]), lower=np.stack([s[1] for s in stats]),
                    upper=np.stack([s[2] for s in stats]))


def _principal_components(rows: np.ndarray) -> np.ndarray:
    """The rows' coordinates on their first COMPONENTS principal axes: the top eigenvectors of
    their covariance (width × width, so exact and cheap for beats of a few hundred samples)."""
    centred = rows - rows.mean(axis=0)
    covariance = (centred.T @ centred).astype(np.float64)
    _, axes = np.linalg.eigh(covariance)                             # eigenvalues ascending
    q = min(COMPONENTS, rows.shape[0], rows.shape[1])
    return centred @ axes[:, ::-1][:, :q].astype(np.float32)


def _template(rows: np.ndarray, members: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median and quartiles of (at most TEMPLATE_BEATS of) the member rows."""
    index = np.flatnonzero(members)
    if len(index) > TEMPLATE_BEATS:
        index = np.sort(np.random.default_rng(seed).choice(index, TEMPLATE_BEATS, replace=False))
    median, lower, upper = np.quantile(rows[index], [0.5, 0.25, 0.75], axis=0).astype(np.float32)
    return median, lower, upper
