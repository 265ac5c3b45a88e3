"""The stages of a run, named in one list (pipeline/stages.py) that the others follow."""
from dashboard.startup import STAGE_WEIGHTS
from pipeline import run
from pipeline.archive import ARCHIVE_COLUMNS
from pipeline.stages import ARCHIVED, CACHED, SEGMENTATION, STAGES


def test_every_list_of_stages_follows_the_one_list():
    assert run.STAGES is STAGES and run.SEGMENTATION is SEGMENTATION      # the conductor's
    assert list(STAGE_WEIGHTS) == list(STAGES)                             # the dashboard's progress
    assert set(SEGMENTATION) | set(CACHED) | set(ARCHIVED) <= set(STAGES)
    assert [name[len("time_"):-len("_s")] for name in ARCHIVE_COLUMNS if name.startswith("time_")] == list(ARCHIVED)
    assert ARCHIVED == ("hash", "setup", "warmup", "load", "wavelet", "peaks", "lengths", "embed", "train", "score",
                        "results")   # the archive's columns, as they were
