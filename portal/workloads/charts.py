"""The dashboard's charts of the last 24 hours (ETTR per hour, the tide per quarter-hour), kept
in Redis for every web process. They are worked out from every job's history, which takes most
of a second at 100,000 GPUs: a beat task keeps the cluster's fresh, so no operator's page waits
for them; a tenant's are worked out by the first page that asks and kept a minute."""

import json
import logging
from datetime import timedelta

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from redis import RedisError

from portal.core.redis import client
from portal.workloads.ettr import series
from portal.workloads.models import Workload
from portal.workloads.usage import tide

log = logging.getLogger(__name__)

KEY = "wanka:day-charts:"  # + scope ("all", or a tenant's id): Redis string, the charts as JSON
KEEP_S = 60  # a tenant's charts are at most this old; the beat refreshes the cluster's sooner


def day_charts(workloads, scope: str | int | None) -> dict:
    """The charts of `workloads` (a queryset): those kept for `scope` if any, else worked out
    (and kept, unless `scope` is None)."""
    if scope is not None:
        try:
            kept = client().get(f"{KEY}{scope}")
        except RedisError:
            kept = None
        if kept is not None:
            return json.loads(kept)
    return refresh(workloads, scope)


def refresh(workloads, scope: str | int | None) -> dict:
    """Work the charts out and keep them for `scope`. They come back as they would from Redis
    (times as ISO strings), so a page gets the same kept or fresh."""
    until = timezone.now()
    since = until - timedelta(hours=24)
    raw = json.dumps(
        {"ettr_series": series(workloads, since, until), "tide": tide(workloads, since, until)},
        cls=DjangoJSONEncoder,
    )
    if scope is not None:
        try:
            client().set(f"{KEY}{scope}", raw, ex=KEEP_S)
        except RedisError:
            log.warning("the day charts of %s were not kept: Redis did not answer", scope)
    return json.loads(raw)


def refresh_cluster() -> None:
    """The operators' charts: every tenant's workloads."""
    refresh(Workload.objects.all(), "all")
