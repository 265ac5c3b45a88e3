"""Beat families: known morphologies are found again, sizes order the families, templates are the
members' medians; on a synthetic recording the premature ventricular beats form their own family."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from pipeline.families import find_families


def _shapes(width: int = 128) -> np.ndarray:
    """Three beat morphologies: a narrow upright QRS, a wide inverted one, a biphasic one."""
    t = np.linspace(-1, 1, width)
    narrow = np.exp(-(t / 0.05) ** 2) + 0.2 * np.exp(-((t - 0.5) / 0.15) ** 2)
    wide = -1.2 * np.exp(-(t / 0.18) ** 2) + 0.4 * np.exp(-((t - 0.55) / 0.2) ** 2)
    biphasic = np.exp(-((t + 0.08) / 0.05) ** 2) - np.exp(-((t - 0.08) / 0.05) ** 2)
    return np.stack([narrow, wide, biphasic]).astype(np.float32)


def test_known_morphologies_come_back_as_families_ordered_by_size():
    rng = np.random.default_rng(0)
    truth = np.repeat([0, 1, 2], [900, 80, 20])
    rows = _shapes()[truth] * rng.uniform(0.9, 1.1, (len(truth), 1)) + 0.03 * rng.standard_normal((len(truth), 128))
    found = find_families(rows.astype(np.float32))
    assert adjusted_rand_score(truth, found.family) > 0.95
    assert list(found.count) == sorted(found.count, reverse=True) and found.count.sum() == len(truth)
    assert found.family.dtype == np.int16 and found.median.shape == (len(found.count), 128)
    largest = rows[found.family == 0]
    np.testing.assert_allclose(found.median[0], np.median(largest, axis=0), atol=0.02)   # ≤ 2000 members: all
    assert np.all(found.lower <= found.median + 1e-6) and np.all(found.median <= found.upper + 1e-6)


def test_premature_ventricular_beats_form_their_own_family(cpu_run):
    beats = cpu_run.run.beats
    pvc = beats["label"] == "V"
    assert pvc.sum() >= 10
    families = beats.loc[pvc, "family"].value_counts()
    main = int(families.index[0])
    assert main != 0, "the PVCs are not in the dominant (normal) family"
    assert families.iloc[0] / pvc.sum() > 0.8, "most PVCs share one family"
    assert (beats.loc[beats["family"] == main, "label"] == "V").mean() > 0.8, "that family is mostly PVCs"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least 2 rows"):
        find_families(np.zeros((1, 64), dtype=np.float32))
