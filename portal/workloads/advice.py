"""The checkpoint advisor with the cluster's own failure rate, once it has seen enough faults."""

from datetime import timedelta

from django.core.cache import cache
from django.db.models import Min, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.cluster.models import FaultEvent, Node
from scheduler import checkpointing, faults

WINDOW = timedelta(days=30)
# Below this many job-killing faults in the window the rate says little: use the reference.
ENOUGH_FAULTS = 20


def failure_rate() -> tuple[float, str]:
    """Job-killing faults per GPU-hour over the last 30 days, and where the figure comes from,
    in the reader's language (the figures are worked out at most every five minutes: they move
    slowly)."""
    rate, seen, measured = cache.get_or_set("wanka:failure-figures", _failure_rate, timeout=300)
    if measured:
        return rate, _("this cluster's last 30 days (%(seen)s job-killing faults)") % {"seen": seen}
    reference = _(
        "Llama 3's rate (one failure per 50,700 GPU-hours): this cluster has seen "
        "%(seen)s job-killing faults in 30 days, too few to judge by"
    )
    return rate, reference % {"seen": seen}


def _failure_rate() -> tuple[float, int, bool]:
    """The rate, the faults seen, and whether the rate is this cluster's own (else the
    reference)."""
    since = timezone.now() - WINDOW
    killing = [code for code, kind in faults.CATALOGUE.items() if kind.kills_job]
    seen = (
        FaultEvent.objects.filter(occurred_at__gte=since).filter(kind__in=killing).count()
        + FaultEvent.objects.filter(occurred_at__gte=since, kind__startswith="xid-")
        .exclude(kind__in=faults.CATALOGUE)
        .count()
    )
    gpus = Node.objects.aggregate(n=Sum("gpu_count"))["n"] or 0
    first = FaultEvent.objects.aggregate(at=Min("occurred_at"))["at"]
    hours = (timezone.now() - max(since, first or since)).total_seconds() / 3600
    if seen < ENOUGH_FAULTS or not gpus or hours <= 0:
        return checkpointing.FAILURES_PER_GPU_HOUR, seen, False
    return seen / (gpus * hours), seen, True


def advice_report(gpus: int) -> dict:
    """Each policy's interval and expected ETTR for a job of `gpus` GPUs, best first."""
    rate, source = failure_rate()
    policies = [
        {
            "policy": a.policy.kind.value,
            "interval_s": a.policy.interval_s,
            "expected_ettr": a.expected_ettr,
            "explanation": a.explanation,
        }
        for a in checkpointing.advise(gpus, failures_per_gpu_hour=rate)
    ]
    return {"gpus": gpus, "failures_per_gpu_hour": rate, "source": source, "policies": policies}
