"""A service's page: its live replicas, then the newest that ended, each saying how it ended (a
scale-down reads as a stop, not as a cancel)."""

import re

from portal.services import autoscaling
from tests.builders import api_client

SPEC = {"name": "chat", "queue": "llm", "gpu_model": "H800", "gpus_per_replica": 8,
        "min_replicas": 2, "max_replicas": 2, "target_concurrency": 4}  # fmt: skip


def rows(page: str) -> list[list[str]]:
    """The replica table's rows, as the cells' text."""
    table = page.split('<table id="replicas">')[1].split("</table>")[0]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]
    ]


def test_a_scaled_down_replica_says_stopped_and_why(acme_llm, bob, client):
    api = api_client(bob)
    pk = api.post("/api/v1/services/", SPEC, format="json").json()["id"]
    autoscaling.tick()
    api.patch(f"/api/v1/services/{pk}/", {"min_replicas": 1}, format="json")
    autoscaling.tick()
    client.force_login(bob)
    page = client.get(f"/services/{pk}/").content.decode()
    assert rows(page) == [
        ["chat-1", "pending", ""],
        ["chat-2", "stopped", "scaled down before it served"],
    ]
    assert "Its 1 replica stops" in page  # the stop's confirmation counts live replicas only
