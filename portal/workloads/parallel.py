"""The parallel plan of each job that names its model: computed by `scheduler.parallelism` for
the GPUs the job really holds whenever that count changes (admission, a shrink, a recovery onto
fewer nodes), recorded with the reason, and handed to the job as ``WANKA_PARALLEL_PLAN``."""

import json
from dataclasses import asdict
from functools import lru_cache

from portal.workloads.choices import CheckpointPolicy
from portal.workloads.models import ParallelPlan, Workload
from scheduler import parallelism


def spec(value) -> dict:
    """A model named or given field by field, resolved to the full spec kept on the job;
    raises `parallelism.SpecError`."""
    return asdict(parallelism.model_spec(value))


@lru_cache(maxsize=4096)
def _best(model: parallelism.ModelSpec, gpu: str, gpus: int, batch: int, **fixed):
    try:
        return parallelism.plan(model, parallelism.GPUS[gpu], gpus, batch, **fixed)
    except (parallelism.NoPlan, ValueError):
        return None


def best(
    model_spec: dict, gpu: str, gpus: int, batch: int, whole_replicas: bool = False
) -> parallelism.ParallelPlan | None:
    """The fastest plan that fits, or None (the model does not fit, or the GPU is unknown to the
    planner); the same question is answered once per process. `whole_replicas`: rather a plan
    whose replicas each hold the whole optimizer state, when one fits, so that a fault-triggered
    save can be made from the replicas a lost node leaves (`faults.triggered_save_possible`)."""
    if gpu not in parallelism.GPUS:
        return None
    model = parallelism.ModelSpec(**model_spec)
    found = _best(model, gpu, gpus, batch, distributed_optimizer=False) if whole_replicas else None
    return found or _best(model, gpu, gpus, batch)


CURVE_POINTS = 9  # sizes planned per elastic job; the engine interpolates between them


def throughput(model_spec: dict, gpu: str, batch: int, fewest: int, held: int) -> tuple:
    """(GPUs, tokens/s) at up to `CURVE_POINTS` sizes from `fewest` to `held` that a job may
    shrink to (part of a node, or whole nodes): what the engine weighs shrinks by."""
    node = parallelism.GPUS[gpu].per_node if gpu in parallelism.GPUS else 8
    sizes = [g for g in range(fewest, held + 1) if g <= node or g % node == 0]
    step = max(1, -(-len(sizes) // CURVE_POINTS))
    picked = {*sizes[::step], sizes[-1]} if sizes else set()
    curve = ((g, best(model_spec, gpu, g, batch)) for g in sorted(picked))
    return tuple((g, p.tokens_per_s) for g, p in curve if p is not None)


def why_not(model_spec: dict, gpu: str, gpus: int, batch: int) -> str | None:
    """Why a job of this model cannot run on `gpus` GPUs of `gpu`, or None when it can."""
    if gpu not in parallelism.GPUS:
        known = ", ".join(parallelism.GPUS)
        return f"The planner has no figures for {gpu} GPUs (it knows {known})."
    if best(model_spec, gpu, gpus, batch) is None:
        return (
            f"{model_spec['name']} with a batch of {batch} does not fit in the memory of "
            f"{gpus} {gpu} GPUs: ask for more GPUs or a smaller model."
        )
    return None


def replan(workload: Workload, gpus: int, attempt: int, reason: str) -> ParallelPlan | None:
    """Record the plan for the `gpus` the workload now holds, unless it is the plan it has."""
    if not workload.model_spec:
        return None
    triggered = workload.checkpoint_policy == CheckpointPolicy.TRIGGERED
    found = best(
        workload.model_spec, workload.gpu_model.name, gpus, workload.global_batch, triggered
    )
    if found is None:
        return None  # the engine never gives a job a size its model cannot use
    plan = found.as_json()
    latest = workload.parallel_plans.last()
    if latest is not None and latest.plan == plan:
        return latest
    return ParallelPlan.objects.create(
        workload=workload, attempt=attempt, gpus=gpus, plan=plan, reason=reason[:300]
    )


def current(workload_ids) -> dict[int, str]:
    """Each workload's current plan as the JSON its processes read; one query."""
    rows = ParallelPlan.objects.filter(workload_id__in=workload_ids).order_by("workload_id", "id")
    return {
        w: json.dumps(plan, separators=(",", ":"))
        for w, plan in rows.values_list("workload_id", "plan")
    }
