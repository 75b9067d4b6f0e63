"""What `wanka ls` shows of a job's GPU models: every one it accepts while it waits, then the
one it runs on."""

import pytest

from scheduler.client.cli import _models


@pytest.mark.parametrize(
    ("workload", "shown"),
    [
        ({"state": "pending", "gpu_model": "H800", "gpu_models": ["H800", "H20"]}, "H800|H20"),
        ({"state": "running", "gpu_model": "H20", "gpu_models": ["H800", "H20"]}, "H20"),
        ({"state": "pending", "gpu_model": "H800"}, "H800"),  # an older portal's rows
    ],
)
def test_models_shown(workload, shown):
    assert _models(workload) == shown
