"""What `wanka ls` shows of a job's GPU models: every one it accepts while it waits, then the
one it runs on; what `wanka quota` shows of a queue's quotas per model and per family."""

import pytest

from scheduler.client.cli import _models, _quota_rows


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


def test_a_family_quota_is_a_row_of_its_models_use_together():
    queues = [
        {
            "name": "llm",
            "quotas": [{"gpu_model": "H800", "guarantee": 8, "nominal": 32}],
            "family_quotas": [{"family": "hopper", "gpu_models": ["H20", "H800"], "nominal": 48}],
        }
    ]
    usage = {
        "rows": [
            {"queue": "llm", "gpu_model": "H800", "in_use": 16, "gpu_hours": 10.0},
            {"queue": "llm", "gpu_model": "H20", "in_use": 4 + 3 / 7, "gpu_hours": 2.5},
            {"queue": "other", "gpu_model": "H20", "in_use": 8, "gpu_hours": 1.0},
        ]
    }
    assert _quota_rows(queues, usage) == [
        ("llm", "H800", 8, 32, "16", "10.0"),
        ("llm", "hopper family", "—", 48, "20.429", "12.5"),  # three sevenths
    ]
