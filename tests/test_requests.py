"""One builder of run requests (pipeline/requests.py): the command line and the dashboard's server
turn the same options into the same request."""
from __future__ import annotations

from dataclasses import replace

import pytest

from dashboard.settings import settings_from
from pipeline.__main__ import _parser, _request
from pipeline.config import VAEConfig
from pipeline.requests import RunRequest, run_request


def test_defaults_are_the_requests_defaults():
    assert run_request() == RunRequest()
    assert run_request(epochs=VAEConfig.epochs) == RunRequest()


def test_a_lead_of_digits_is_an_index_and_two_names_must_agree():
    assert run_request(column="2").column == 2 and run_request(lead="MLII").column == "MLII"
    assert run_request(lead="1", column="1").column == 1
    with pytest.raises(ValueError, match=r"^--lead 'V1' and --column 'II' name different leads; give one$"):
        run_request(lead="V1", column="II")


def test_the_command_line_and_the_server_build_the_same_request(tmp_path):
    options = ["--fs", "360", "--column", "1", "--epochs", "3", "--out", str(tmp_path), "--no-cache"]
    args = _parser().parse_args(["run", "rec.csv", "--device", "cpu", *options])
    served = settings_from(["--input", "rec.csv", "--device", "cpu", *options], {}).request
    assert served == replace(_request(args, args.input), warm_up=False)   # the server skips the warm-up
    assert served.column == 1 and served.vae.epochs == 3 and served.fs == 360.0 and not served.use_cache
