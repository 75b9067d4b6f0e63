"""The operator's dashboard opens on what needs them: each count links to where it is dealt
with, and a fleet with nothing wrong says so."""

from django.utils import timezone

from portal.agents.intake import record_fault
from portal.cluster.models import Pod
from portal.quotas.models import Budget
from portal.workloads.choices import State
from scheduler import faults
from tests.builders import make_workload
from tests.portal.workloads.test_budgets import book
from tests.portal.workloads.test_recovery import running_job


def test_nothing_wrong_says_so(cluster, operator, client):
    client.force_login(operator)
    page = client.get("/").content.decode()
    assert "Nothing needs you now." in page


def test_each_thing_wrong_is_counted_with_where_to_deal_with_it(acme_llm, operator, client):
    job, (node, _) = running_job(acme_llm, checkpoint_policy="none")
    record_fault(node, faults.lookup("xid-79"), "off the bus")  # a node down, a job recovering
    make_workload(acme_llm, "gone", gpus=8, state=State.FAILED, finished_at=timezone.now())
    Pod.objects.update(hot_spares=1)  # the builders keep none
    Budget.objects.create(tenant=acme_llm.tenant, gpu_hours=10)
    book(acme_llm, 20, 1)
    client.force_login(operator)
    page = client.get("/").content.decode()
    pods = Pod.objects.count()
    for said, where in [
        ("1 node down", "/ops/cluster/"),
        ("1 job recovering", "/ops/workloads/?state=recovering"),
        ("1 job failed in the last day", "/ops/workloads/?state=failed"),
        (f"{pods} pods short of hot spares", "/ops/spares/"),
        ("1 budget spent", "/ops/budgets/"),
    ]:
        assert f'<a href="{where}">{said}</a>' in page, said
    assert "Nothing needs you now." not in page
    assert "cordoned or draining" not in page
