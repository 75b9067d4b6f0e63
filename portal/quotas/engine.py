"""Queues and cohorts as the engine sees them, read from the database in a few queries: the
scheduling cycle's snapshot and the API's "could this queue ever hold it" check use the same
ones, so the API never refuses what the engine would admit."""

from portal.cluster.models import GpuModel
from portal.quotas.models import Cohort, Queue, region_capacity
from scheduler import engine
from scheduler.engine.quota import QuotaLedger


def engine_quota(quota) -> engine.Quota:
    return engine.Quota(
        gpu_model=quota.gpu_model.name,
        nominal=quota.nominal,
        guarantee=quota.guarantee,
        borrowing_limit=quota.borrowing_limit,
        lending_limit=quota.lending_limit,
    )


def preemption_policy(queue: Queue) -> engine.PreemptionPolicy:
    return engine.PreemptionPolicy(
        reclaim_within_cohort=engine.ReclaimWithinCohort(queue.reclaim_within_cohort),
        within_cluster_queue=engine.WithinClusterQueue(queue.within_cluster_queue),
        borrow_within_cohort=queue.borrow_within_cohort,
        max_priority_threshold=queue.max_priority_threshold,
        fair_sharing=engine.FairSharing(queue.fair_sharing),
        preempt_by_fair_share=queue.preempt_by_fair_share,
    )


def with_quotas(queues):
    """Queues with what the engine reads of them, in four queries."""
    return queues.select_related("cohort", "region", "tenant").prefetch_related(
        "quotas__gpu_model", "family_quotas"
    )


def family_models(queues) -> dict[str, tuple[str, ...]]:
    """Each GPU family's models, by name, where one of `queues` (with their family quotas
    prefetched) has a family quota; else nothing is read."""
    found: dict[str, tuple[str, ...]] = {}
    if not any(queue.family_quotas.all() for queue in queues):
        return found
    for name, family in GpuModel.objects.exclude(family="").values_list("name", "family"):
        found[family] = (*found.get(family, ()), name)
    return found


def queues(objects=None) -> tuple[engine.Queue, ...]:
    """Every queue (or those of `objects`, read `with_quotas`) as the engine sees it, named
    `tenant/queue` so that its reasons say whose (`workloads.reasons` shows a tenant only its
    own)."""
    objects = list(with_quotas(Queue.objects.all()) if objects is None else objects)
    families = family_models(objects)
    return tuple(
        engine.Queue(
            id=q.id,
            name=f"{q.tenant.slug}/{q.name}",
            region=q.region.name,
            cohort=q.cohort.name if q.cohort else None,
            priority=q.priority,
            weight=q.weight,
            strategy=engine.Strategy(q.strategy),
            preemption=preemption_policy(q),
            quotas=tuple(engine_quota(quota) for quota in q.quotas.all()),
            families=tuple(
                engine.FamilyQuota(f.family, families[f.family], f.nominal, f.borrowing_limit)
                for f in q.family_quotas.all()
                if f.family in families
            ),
        )
        for q in objects
    )


def cohorts() -> tuple[engine.Cohort, ...]:
    return tuple(
        engine.Cohort(
            c.name,
            c.parent.name if c.parent else None,
            tuple(engine_quota(quota) for quota in c.quotas.all()),
        )
        for c in Cohort.objects.select_related("parent").prefetch_related("quotas__gpu_model")
    )


def weights() -> dict[str, float | None]:
    """Each GPU model's worth to fair sharing (`GpuModel.weight`) by name, None where it has
    none: neither an operator's nor the planner's."""
    return {model.name: model.weight for model in GpuModel.objects.all()}


def worth(found: dict[str, float | None] | None = None) -> tuple[tuple[str, float], ...]:
    """What one GPU of each model is worth to fair sharing, for the models of `found` (by
    default `weights()`) that have a worth. The engine counts a model left out 1 a GPU beside
    the others (`QuotaLedger`), so one model without a worth never turns weighing off for the
    rest; only when no model has one does it count each model apart."""
    found = weights() if found is None else found
    return tuple((name, weight) for name, weight in found.items() if weight)


def ledger() -> QuotaLedger:
    """An empty ledger of every queue and cohort: what quota allows with nothing running."""
    return QuotaLedger(queues(), cohorts(), worth())


def ceiling(queue: Queue, gpu_model: GpuModel) -> int:
    """The most GPUs of `gpu_model` the queue could ever hold: its quota plus what its cohort
    tree could lend it, as the engine's ledger counts it, and never more than the region has."""
    empty = ledger()
    most = empty.ceiling(empty.queue(queue.pk), gpu_model.name)
    return min(most, region_capacity(queue.region_id, gpu_model.pk))
