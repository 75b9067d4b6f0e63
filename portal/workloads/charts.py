"""The dashboard's charts of ETTR and of the tide over the last day, week or month, kept in
Redis for every web process. They are worked out from every job's history, which takes most
of a second for a day at 100,000 GPUs: a beat task keeps the cluster's fresh, so no operator's
page waits for them; a tenant's are worked out by the first page that asks and kept a while."""

import json
import logging
from datetime import timedelta

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from redis import RedisError

from portal.core.redis import client
from portal.workloads.ettr import series
from portal.workloads.models import Workload
from portal.workloads.usage import tide

log = logging.getLogger(__name__)

KEY = "wanka:day-charts:"  # + span:scope (scope "all", or a tenant's id): the charts as JSON
# The ranges offered: (length, ETTR slices, the tide's step, seconds kept). A longer range
# changes less from one minute to the next, so its charts are kept longer.
SPANS = {
    "24h": (timedelta(hours=24), 24, timedelta(minutes=15), 60),
    "7d": (timedelta(days=7), 28, timedelta(hours=2), 600),
    "30d": (timedelta(days=30), 30, timedelta(hours=6), 1800),
}
SPAN_NAMES = {"24h": _("24 h"), "7d": _("7 days"), "30d": _("30 days")}
BEAT_S = 30  # how often the beat task looks at the cluster's charts


def day_charts(workloads, scope: str | int | None, span: str = "24h") -> dict:
    """The charts of `workloads` (a queryset) over `span`: those kept for `scope` if any,
    else worked out (and kept, unless `scope` is None)."""
    if scope is not None:
        try:
            kept = client().get(f"{KEY}{span}:{scope}")
        except RedisError:
            kept = None
        if kept is not None:
            return json.loads(kept)
    return refresh(workloads, scope, span)


def refresh(workloads, scope: str | int | None, span: str = "24h") -> dict:
    """Work the charts out and keep them for `scope`. They come back as they would from Redis
    (times as ISO strings), so a page gets the same kept or fresh."""
    length, slices, step, keep_s = SPANS[span]
    until = timezone.now()
    since = until - length
    raw = json.dumps(
        {
            "ettr_series": series(workloads, since, until, slices),
            "tide": tide(workloads, since, until, step),
        },
        cls=DjangoJSONEncoder,
    )
    if scope is not None:
        try:
            client().set(f"{KEY}{span}:{scope}", raw, ex=keep_s)
        except RedisError:
            log.warning("the %s charts of %s were not kept: Redis did not answer", span, scope)
    return json.loads(raw)


def refresh_cluster() -> list[str]:
    """The operators' charts (every tenant's workloads) of each span that would expire before
    the beat's next look; the spans refreshed."""
    fresh = []
    for span in SPANS:
        if span != "24h" and client().ttl(f"{KEY}{span}:all") > 2 * BEAT_S:
            continue
        refresh(Workload.objects.all(), "all", span)
        fresh.append(span)
    return fresh
