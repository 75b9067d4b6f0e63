"""Reasons name queues `tenant/queue` and workloads by id for operators; a tenant reads its own
by name and another tenant's as "another tenant's", without their figures (API, pages, live)."""

import pytest

from portal.workloads.cycle import scheduling_cycle
from portal.workloads.reasons import Reader
from tests.builders import api_client, make_cluster, make_queue, make_workload


@pytest.fixture
def reclaimed(db, acme, globex):
    """Globex's elastic borrower is shrunk for Acme's claimant."""
    make_cluster({"dc1": {"p1": ("H800", 2)}})
    acme_q = make_queue(acme, "llm", cohort="research", h800=32)
    globex_q = make_queue(globex, "train", cohort="research", h800=32)
    borrower = make_workload(globex_q, "borrower", gpus=64, min_gpus=32, checkpoint_policy="none")
    scheduling_cycle()
    claimant = make_workload(acme_q, "claimant", gpus=32)
    scheduling_cycle()
    return borrower, claimant


def test_the_operator_reads_whose_queue_and_which_workload(reclaimed):
    borrower, claimant = reclaimed
    reason = borrower.events.last().reason
    assert f"workload {claimant.pk}" in reason and "queue acme/llm is under" in reason
    assert "(0/32 in use, job needs 32)" in reason
    assert Reader(None).read(reason) == reason


def test_the_victims_tenant_reads_neither_the_claimants_queue_nor_its_figures(
    reclaimed, charlie, client
):
    borrower, claimant = reclaimed
    detail = api_client(charlie).get(f"/api/v1/workloads/{borrower.pk}/").json()
    shrunk = detail["events"][-1]["reason"]
    assert "acme" not in shrunk and "llm" not in shrunk
    assert f"workload {claimant.pk}" not in shrunk and "0/32 in use" not in shrunk
    assert shrunk.endswith("to make room for a workload of another tenant: another tenant's queue")
    client.force_login(charlie)
    page = client.get(f"/workloads/{borrower.pk}/").content.decode()
    assert "acme" not in page and f"workload {claimant.pk}" not in page


def test_the_claimants_tenant_reads_its_own_queue_by_name(reclaimed, alice):
    _, claimant = reclaimed
    reason = api_client(alice).get(f"/api/v1/workloads/{claimant.pk}/").json()["pending_reason"]
    assert "queue llm" in reason and "acme/" not in reason and "globex" not in reason


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("queue acme/llm would exceed its H800 quota (8/8 in use, job needs 8)",
         "queue llm would exceed its H800 quota (8/8 in use, job needs 8)"),
        ("reclaimed for workload 99: queue globex/train is under its H800 nominal quota (1/8 "
         "in use, job needs 8), and queue acme/llm borrows 8 H800 GPUs beyond its nominal 0",
         "reclaimed for a workload of another tenant: another tenant's queue, and queue llm "
         "borrows 8 H800 GPUs beyond its nominal 0"),
        ("preempting 2 workloads (queue globex/cv: 2) to make room",
         "preempting workloads (another tenant's queue) to make room"),
        ("preempting 3 workloads (queue acme/llm: 1, globex/cv: 2) to make room (queue "
         "acme/llm is under its H800 nominal quota (0/8 in use))",
         "preempting workloads (queue llm: 1, another tenant's queue) to make room (queue llm "
         "is under its H800 nominal quota (0/8 in use))"),
        ("preempting 2 workloads (queue globex/cv: 1, globex/nlp: 1) to make room",
         "preempting workloads (another tenant's queue) to make room"),
        ("shrinking 1 elastic workload and waiting for 4 preempted workloads to stop to make "
         "room; it starts once they have stopped",
         "shrinking elastic workloads and waiting for preempted workloads to stop to make "
         "room; it starts once they have stopped"),
        ("held for gangs (workloads 97, 98)", "held for gangs (other tenants' workloads)"),
    ],
    ids=["its own queue", "another's claimant", "another's victims",
         "its own and another's victims", "two other queues' victims", "how many it waits for",
         "another's gangs"],
)  # fmt: skip
def test_what_a_tenant_reads(db, acme, text, read):
    assert Reader(acme).read(text) == read
