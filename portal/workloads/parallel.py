"""The parallel plan of each job that names its model: computed by `scheduler.parallelism` for
the GPUs the job really holds whenever that count changes (admission, a shrink, a recovery onto
fewer nodes), recorded with the reason, and handed to the job as ``WANKA_PARALLEL_PLAN``."""

import json
from dataclasses import asdict

from django.utils.translation import gettext as _

from portal.workloads import calibration as fleet
from portal.workloads import words
from portal.workloads.choices import CheckpointPolicy
from portal.workloads.models import ParallelPlan, Workload
from scheduler import calibration, parallelism


def spec(value) -> dict:
    """A model named or given field by field, resolved to the full spec kept on the job;
    raises `parallelism.SpecError`."""
    return asdict(parallelism.model_spec(value))


def best(
    model_spec: dict,
    gpu: str,
    gpus: int,
    batch: int,
    whole_replicas: bool = False,
    datacenters: int = 1,
) -> parallelism.ParallelPlan | None:
    """The fastest plan that fits, or None (the model does not fit, or the GPU is unknown to the
    planner). `whole_replicas`: rather a plan whose replicas each hold the whole optimizer
    state, when one fits, so that a fault-triggered save can be made from the replicas a lost
    node leaves (`faults.triggered_save_possible`)."""
    if gpu not in parallelism.GPUS:
        return None
    args = (parallelism.ModelSpec(**model_spec), parallelism.GPUS[gpu], gpus, batch)
    where = {"datacenters": datacenters} if datacenters > 1 else {}
    if whole_replicas:
        found = parallelism.best_plan(*args, **where, distributed_optimizer=False)
        if found is not None:
            return found
    return parallelism.best_plan(*args, **where)


class Budget:
    """At most `searches` planner searches not answered from memory while one snapshot is
    built: a burst of new jobs with models spreads over a few cycles instead of making one
    long. What is left unplanned meanwhile takes the cautious default."""

    def __init__(self, searches: int = 40):
        self.left = searches
        self._misses = parallelism.best_plan.cache_info().misses

    def allows(self) -> bool:
        misses = parallelism.best_plan.cache_info().misses
        self.left -= misses - self._misses
        self._misses = misses
        return self.left > 0


# A job that may span data centers does so only when the planner says it keeps this much.
SPAN_KEEPS = 0.9


def spans_datacenters(model_spec: dict, gpu: str, gpus: int, batch: int) -> bool:
    """Whether the job loses little (`SPAN_KEEPS`) when its replicas are split over two data
    centers, the gradients crossing the region's link."""
    one, two = (best(model_spec, gpu, gpus, batch, datacenters=k) for k in (1, 2))
    return one is not None and two is not None and two.tokens_per_s >= SPAN_KEEPS * one.tokens_per_s


def throughput(
    model_spec: dict, gpu: str, batch: int, fewest: int, most: int, factors: calibration.Table
) -> tuple:
    """The planner's (GPUs, tokens/s) curve of a job that may run on `fewest` to `most`,
    calibrated by the fleet's `factors` at each size."""
    if gpu not in parallelism.GPUS:
        return ()
    model = parallelism.ModelSpec(**model_spec)
    found = parallelism.curve(model, parallelism.GPUS[gpu], batch, fewest, most)
    return calibration.calibrated_curve(found, factors, model.name, gpu)


def speeds(
    model_spec: dict, gpus_models: list[str], gpus: int, batch: int, factors: calibration.Table
) -> tuple:
    """(GPU model, tokens/s per GPU) of a job on `gpus` GPUs of each model it accepts, by the
    planner calibrated by the fleet; a model it has no plan for is left out."""
    found = []
    for gpu in gpus_models:
        plan = best(model_spec, gpu, gpus, batch)
        if plan is not None:
            factor = calibration.lookup(factors, model_spec["name"], gpu, gpus)
            rate = plan.tokens_per_s / (factor.factor if factor else 1.0)
            found.append((gpu, rate / gpus))
    return tuple(found)


def why_not(model_spec: dict, gpu: str, gpus: int, batch: int) -> str | None:
    """Why a job of this model cannot run on `gpus` GPUs of `gpu`, or None when it can."""
    if gpu not in parallelism.GPUS:
        known = ", ".join(parallelism.GPUS)
        return _("The planner has no figures for %(gpu)s GPUs (it knows %(known)s).") % {
            "gpu": gpu,
            "known": known,
        }
    if best(model_spec, gpu, gpus, batch) is None:
        return _(
            "%(model)s with a batch of %(batch)s does not fit in the memory of %(gpus)s "
            "%(gpu)s GPUs: ask for more GPUs or a smaller model."
        ) % {"model": model_spec["name"], "batch": batch, "gpus": gpus, "gpu": gpu}
    return None


def replan(
    workload: Workload,
    gpus: int,
    attempt: int,
    reason: str,
    datacenters: int = 1,
    factors: calibration.Table | None = None,
) -> ParallelPlan | None:
    """Record the plan for the `gpus` the workload now holds (over `datacenters`), unless it is
    the plan it has. When no layout fits that many GPUs (a recovery left a count its model
    cannot use), an empty plan is recorded with the reason, so the job is never handed the
    plan of a size it no longer holds. Its predictions are calibrated by the fleet's
    `factors` (read now when not given), and say by how much."""
    if not workload.model_spec:
        return None
    triggered = workload.checkpoint_policy == CheckpointPolicy.TRIGGERED
    spec, gpu, batch = workload.model_spec, workload.gpu_model.name, workload.global_batch
    found = best(spec, gpu, gpus, batch, triggered, datacenters)
    if found is None and datacenters > 1:
        found = best(spec, gpu, gpus, batch, triggered)
        if found is not None:
            reason = words.PLANNED_AS_ONE.format(reason=reason, datacenters=datacenters)
    if factors is None:
        factors = fleet.factors()
    plan = _as_json(found, calibration.lookup(factors, spec["name"], gpu, gpus))
    if found is None:
        reason = words.NO_LAYOUT.format(model=spec["name"], gpus=gpus, gpu=gpu, reason=reason)
    latest = workload.parallel_plans.last()
    if latest is not None and (latest.plan, latest.gpus) == (plan, gpus):
        return latest
    return ParallelPlan.objects.create(
        workload=workload, attempt=attempt, gpus=gpus, plan=plan, reason=reason[:300]
    )


def _as_json(found: parallelism.ParallelPlan | None, factor: calibration.Factor | None) -> dict:
    """The plan as the job and its page read it: calibrated, with the factor it took."""
    if found is None:
        return {}
    plan = calibration.calibrated(found, factor).as_json()
    if factor is not None:
        plan["calibration"] = calibration.record(factor, found.iteration_s)
    return plan


def current(workload_ids) -> dict[int, str]:
    """Each workload's current plan as the JSON its processes read (none where no layout fits
    what it holds); one query."""
    rows = ParallelPlan.objects.filter(workload_id__in=workload_ids).order_by("workload_id", "id")
    latest = dict(rows.values_list("workload_id", "plan"))  # the last row of each wins
    return {w: json.dumps(plan, separators=(",", ":")) for w, plan in latest.items() if plan}
