"""What needs an operator now, at the top of their dashboard: nodes out of service, jobs
recovering or failed in the last day, requests waiting for a decision, spare pools short of
their target and budgets spent; each a count with the page where it is dealt with, only when
there is one. A few queries whatever the fleet's size."""

from datetime import timedelta

from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import ngettext

from portal.cluster.choices import Health
from portal.cluster.models import Node, Pod
from portal.dashboard.spares import pool_counts
from portal.quotas.choices import RequestStatus
from portal.quotas.models import Budget, BudgetRequest, QuotaRequest
from portal.workloads.budgets import standings
from portal.workloads.choices import State
from portal.workloads.models import Workload

DAY = timedelta(days=1)


def attention(now=None) -> list[tuple[str, str]]:
    """(what, where) pairs, the most urgent first."""
    now = now or timezone.now()
    nodes = Node.objects.aggregate(
        down=Count("pk", filter=Q(health=Health.DOWN)),
        out=Count("pk", filter=Q(health__in=[Health.CORDONED, Health.DRAINING])),
        repairing=Count("pk", filter=Q(health=Health.REPAIRING)),
    )
    jobs = Workload.objects.aggregate(
        recovering=Count("pk", filter=Q(state=State.RECOVERING)),
        failed=Count("pk", filter=Q(state=State.FAILED, finished_at__gte=now - DAY)),
    )
    counts = pool_counts()
    short = sum(
        1
        for pod in Pod.objects.only("pk", "hot_spares")
        if pod.hot_spares > counts[pod.pk]["ready"]
    )
    requests = QuotaRequest.objects.filter(status=RequestStatus.PENDING).count()
    requests += BudgetRequest.objects.filter(status=RequestStatus.PENDING).count()
    budgets = Budget.objects.select_related("tenant", "queue")
    spent = sum(1 for standing in standings(budgets, now, burn=False) if standing.left <= 0)
    map_, ops = reverse("cluster-map"), reverse("ops-workloads")
    found = [
        (ngettext("%(n)d node down", "%(n)d nodes down", nodes["down"]), nodes["down"], map_),
        (ngettext("%(n)d job recovering", "%(n)d jobs recovering", jobs["recovering"]),
         jobs["recovering"], f"{ops}?state={State.RECOVERING}"),
        (ngettext("%(n)d job failed in the last day", "%(n)d jobs failed in the last day",
                  jobs["failed"]), jobs["failed"], f"{ops}?state={State.FAILED}"),
        (ngettext("%(n)d request waits for a decision", "%(n)d requests wait for a decision",
                  requests), requests, reverse("ops-quota-requests")),
        (ngettext("%(n)d pod short of hot spares", "%(n)d pods short of hot spares", short),
         short, reverse("ops-spares")),
        (ngettext("%(n)d node cordoned or draining", "%(n)d nodes cordoned or draining",
                  nodes["out"]), nodes["out"], map_),
        (ngettext("%(n)d node in repair", "%(n)d nodes in repair", nodes["repairing"]),
         nodes["repairing"], map_),
        (ngettext("%(n)d budget spent", "%(n)d budgets spent", spent), spent,
         reverse("ops-budgets")),
    ]  # fmt: skip
    return [(text % {"n": n}, where) for text, n, where in found if n]
