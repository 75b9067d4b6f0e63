"""The operators' page of faults and recoveries: each fault with the workloads it hit, how far
their recoveries got and how long they took; filtered, paged, for staff only."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.cluster.models import FaultEvent
from portal.workloads.choices import RecoveryOutcome, RecoveryStep
from portal.workloads.models import Recovery
from tests.builders import make_workload

pytestmark = pytest.mark.django_db


def fault(node, kind="xid-79", ago=timedelta(minutes=10), **fields):
    made = FaultEvent.objects.create(node=node, kind=kind, **fields)
    FaultEvent.objects.filter(pk=made.pk).update(occurred_at=timezone.now() - ago)
    made.refresh_from_db()
    return made


def recovered(workload, fault, after_s=None):
    """A recovery of `workload` from `fault`, done `after_s` seconds after it, else running."""
    if after_s is None:
        return Recovery.objects.create(workload=workload, fault=fault, step=RecoveryStep.REPLACING)
    return Recovery.objects.create(
        workload=workload,
        fault=fault,
        step=RecoveryStep.DONE,
        outcome=RecoveryOutcome.SPARE,
        finished_at=fault.occurred_at + timedelta(seconds=after_s),
    )


def test_an_operator_sees_a_fault_with_its_recovery(cluster, acme_llm, operator, client):
    job = make_workload(acme_llm, "train")
    other = make_workload(acme_llm, "eval")
    xid = fault(cluster[0], gpu_index=3, code=79)
    recovered(job, xid, after_s=90)
    recovered(other, fault(cluster[1], kind="nic-down"))
    client.force_login(operator)
    page = client.get("/ops/faults/").content.decode()
    assert f'data-fault="{xid.pk}"' in page
    assert f'href="/ops/nodes/{cluster[0].pk}/"' in page
    assert f'href="/ops/workloads/{job.pk}/"' in page and "train" in page
    assert "GPU fell off the bus" in page and "Restarted on hot spares" in page
    assert "recovered in 90 s" in page and "still recovering" in page
    assert "2 faults" in page and "1 recovery done" in page and "1 still running" in page
    assert "median time to recover 90 s" in page
    assert "/ops/faults/" in client.get("/ops/workloads/").content.decode()  # the nav link


def test_filters_by_kind_data_center_node_and_since(cluster, acme_llm, operator, client):
    job = make_workload(acme_llm, "train")
    recent = fault(cluster[0], kind="xid-79")
    old = fault(cluster[0], kind="xid-79", ago=timedelta(days=2))
    nic = fault(cluster[-1], kind="nic-down")
    recovered(job, old, after_s=30)
    client.force_login(operator)

    def shown(query):
        page = client.get(f"/ops/faults/?{query}").content.decode()
        return {f.pk for f in (recent, old, nic) if f'data-fault="{f.pk}"' in page}

    assert shown("") == {recent.pk, old.pk, nic.pk}
    assert shown("kind=xid-79") == {recent.pk, old.pk}
    assert shown("kind=nic-down") == {nic.pk}
    assert shown("since=24h") == {recent.pk, nic.pk}
    assert shown("since=7d&kind=xid-79") == {recent.pk, old.pk}
    assert shown("since=1h&kind=xid-79") == {recent.pk}
    dc = cluster[0].leaf.pod.datacenter
    assert shown(f"datacenter={dc.pk}") == {recent.pk, old.pk}
    assert shown(f"node={cluster[-1].name[-3:].upper()}") == {nic.pk}
    page = client.get("/ops/faults/?since=24h").content.decode()
    assert "no time to recover yet" in page  # the old fault's recovery is out of the window


def test_a_member_is_refused(cluster, bob, client):
    fault(cluster[0])
    client.force_login(bob)
    assert client.get("/ops/faults/").status_code == 403
    assert client.post("/ops/faults/").status_code == 403


def test_the_query_count_does_not_grow_with_rows(cluster, acme_llm, operator, client):
    def make(count):
        for i in range(count):
            made = fault(cluster[i % len(cluster)], kind="xid-79" if i % 2 else "nic-down")
            recovered(make_workload(acme_llm, f"job-{count}-{i}"), made, after_s=i)
            recovered(make_workload(acme_llm, f"run-{count}-{i}"), made)

    client.force_login(operator)
    make(2)
    with CaptureQueriesContext(connection) as few:
        assert client.get("/ops/faults/").status_code == 200
    make(18)
    with CaptureQueriesContext(connection) as more:
        page = client.get("/ops/faults/").content.decode()
    assert page.count("data-recovery=") == 40
    assert len(more.captured_queries) == len(few.captured_queries)
