"""Cluster specs: the nodes, queues and cohorts a simulation runs on, from JSON.

    {
      "name": "example",
      "datacenters": [
        {"name": "dc1", "region": "", "pods": [
          {"name": "p", "count": 2, "leaves": 4, "nodes_per_leaf": 32,
           "gpu_model": "H800", "gpus_per_node": 8},
          {"name": "h20", "leaves": [{"name": "l1", "nodes": 16, "gpu_model": "H20"}]}
        ]}
      ],
      "cohorts": [{"name": "research", "parent": null, "quotas": {"H800": 0}}],
      "queues": [
        {"name": "nlp", "cohort": "research", "priority": 0, "weight": 1.0,
         "strategy": "best_effort_fifo",
         "quotas": {"H800": {"nominal": 512, "guarantee": 128, "borrowing_limit": null,
                             "lending_limit": null}},
         "preemption": {"reclaim_within_cohort": "Any", "within_cluster_queue": "LowerPriority",
                        "borrow_within_cohort": false, "max_priority_threshold": null,
                        "fair_sharing": "LessThanOrEqualToFinalShare"}},
        {"name": "cv", "cohort": "research", "quotas": {"H800": 256},
         "families": {"hopper": {"models": ["H800", "H20"], "nominal": 320}}}
      ],
      "budgets": [
        {"name": "tenant acme", "queues": ["nlp", "cv"], "gpu_hours": 100000, "hard": true,
         "window_days": 30, "rolling": false, "used": 0, "weights": {"H800": 1.0}}
      ],
      "memory_gb": {"H800": 80},
      "worth": {"H20": 200}
    }

A pod with `count` n stands for n pods named `<name>1` ... `<name>n`. Leaves are given as a
count (with `nodes_per_leaf`, `gpu_model` and `gpus_per_node`, default 8) or as a list of
leaves, each with its own `nodes` and `gpu_model`. Nodes are named `dc1-p1-l1-n1` and numbered
from 1 in spec order; queues are numbered from 1 in spec order. A quota given as a number is
the nominal quota; a family quota (`families`) lists its models and sits above their quotas
(`scheduler.engine.quota`). Omitted queue fields take the engine's defaults. Budgets are optional
(`scheduler.sim.budgets`): weighted GPU-hours per window of `window_days` (default 30), calendar
windows one after the other unless `rolling`, `used` what the window had used at the start, a
GPU model's weight 1 unless given; a hard one defaults to false. `memory_gb` gives a GPU model's
memory, which names its MIG profiles (`scheduler.mig`); a model not given has its memory in the
planner's catalogue (`scheduler.parallelism.GPUS`: A100 80, H200 141), else no MIG. `worth`
gives what one GPU of a model counts for when fair sharing weighs borrowing across models
(`scheduler.engine.quota`), as an operator's worth does in the portal; a model not given has its
dense BF16 TFLOPS in the planner's catalogue (H800 989, A100 312, H20 148), as in the portal,
else it counts as the median of the others. A bad spec raises `SpecError` naming the place, e.g.
`queues[2].quotas.H800.nominal: must be a whole number`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Any

from scheduler.engine import (
    Budget,
    Cohort,
    FairSharing,
    FamilyQuota,
    Node,
    PreemptionPolicy,
    Queue,
    Quota,
    ReclaimWithinCohort,
    Strategy,
    WithinClusterQueue,
)
from scheduler.mig import Profile, profiles
from scheduler.parallelism import GPUS
from scheduler.sim.budgets import BudgetSpec


class SpecError(ValueError):
    """A cluster spec that cannot be read, naming the place at fault."""


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster for the simulator: engine nodes (all GPUs free), queues and cohorts."""

    name: str
    nodes: tuple[Node, ...]
    queues: tuple[Queue, ...]
    cohorts: tuple[Cohort, ...] = ()
    spares: tuple[int, ...] = ()  # hot spares among `nodes`: no work, only scripted recoveries
    budgets: tuple[BudgetSpec, ...] = ()
    memory_gb: tuple[tuple[str, int], ...] = ()  # GPU models' memory as the spec gives it
    worth: tuple[tuple[str, float], ...] = ()  # GPU models' worth as the spec gives it

    @cached_property
    def mig_profiles(self) -> dict[str, dict[str, Profile]]:
        """The MIG profiles of each of its GPU models that has them."""
        return mig_profiles(self.capacity, dict(self.memory_gb))

    @cached_property
    def model_worth(self) -> tuple[tuple[str, float], ...]:
        """What one GPU of each model it has nodes or quota of is worth to fair sharing
        (`Snapshot.worth`): the spec's worth, else the model's dense BF16 TFLOPS in the
        planner's catalogue, as the portal counts it (`GpuModel.weight`); a model with neither
        is left out, for the engine to count as the median of the others."""
        quotas = [q.model_quotas for q in self.queues] + [c.quotas for c in self.cohorts]
        models = {*self.capacity, *(quota.gpu_model for each in quotas for quota in each)}
        found = {m: float(GPUS[m].bf16_tflops) for m in models if m in GPUS}
        return tuple(sorted({**found, **dict(self.worth)}.items()))

    @cached_property
    def capacity(self) -> dict[str, int]:
        """GPUs per GPU model."""
        total: Counter[str] = Counter()
        for node in self.nodes:
            total[node.gpu_model] += node.gpus
        return dict(sorted(total.items()))

    @cached_property
    def queue_ids(self) -> dict[str, int]:
        """Queue id by name."""
        return {queue.name: queue.id for queue in self.queues}

    @property
    def gpus(self) -> int:
        return sum(self.capacity.values())


def load_spec(path: str | Path) -> ClusterSpec:
    """The cluster spec in a JSON file."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as why:
        raise SpecError(f"{path}: not JSON ({why})") from None
    return parse_spec(data)


def parse_spec(data: dict[str, Any]) -> ClusterSpec:
    """The cluster spec of a JSON-like dict (see the module docstring)."""
    if not isinstance(data, dict):
        raise SpecError("the spec must be a JSON object")
    nodes = _nodes(_list(data, "datacenters", "datacenters"))
    if not nodes:
        raise SpecError("datacenters: the cluster has no nodes")
    cohorts = tuple(_cohort(c, f"cohorts[{i}]") for i, c in enumerate(data.get("cohorts", [])))
    queues = tuple(
        _queue(q, i + 1, f"queues[{i}]") for i, q in enumerate(_list(data, "queues", "queues"))
    )
    names = Counter(queue.name for queue in queues)
    twice = sorted(name for name, count in names.items() if count > 1)
    if twice:
        raise SpecError(f"queues: names used twice: {', '.join(twice)}")
    ids = {queue.name: queue.id for queue in queues}
    budgets = tuple(_budget(b, ids, f"budgets[{i}]") for i, b in enumerate(data.get("budgets", [])))
    memory = data.get("memory_gb", {})
    if not isinstance(memory, dict):
        raise SpecError("memory_gb: must map GPU models to their memory in GB")
    worth = data.get("worth", {})
    if not isinstance(worth, dict):
        raise SpecError("worth: must map GPU models to what one GPU of each is worth")
    return ClusterSpec(
        str(data.get("name", "cluster")),
        tuple(nodes),
        queues,
        cohorts,
        budgets=budgets,
        memory_gb=tuple((str(m), _whole(gb, f"memory_gb.{m}", 1)) for m, gb in memory.items()),
        worth=tuple((str(m), _worth(value, f"worth.{m}")) for m, value in worth.items()),
    )


def _worth(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise SpecError(f"{where}: must be a number above 0, not {value!r}")
    return float(value)


def mig_profiles(
    models: Iterable[str], memory_gb: Mapping[str, int] | None = None
) -> dict[str, dict[str, Profile]]:
    """The MIG profiles of each of `models` that has them (`scheduler.mig.profiles`), from its
    memory in `memory_gb`, else in the planner's catalogue."""
    found = {}
    for model in models:
        memory = (memory_gb or {}).get(model) or (GPUS[model].memory_gib if model in GPUS else 0)
        if memory and (named := profiles(model, int(memory))):
            found[model] = named
    return found


def layout(
    nodes: int,
    *,
    gpu_model: str,
    nodes_per_leaf: int,
    leaves_per_pod: int,
    datacenters: int = 1,
    gpus_per_node: int = 8,
) -> list[dict]:
    """The `datacenters` part of a spec for `nodes` nodes in full leaves and pods (the last
    leaf and pod take the rest), the pods shared out evenly between the data centers."""
    leaves = [min(nodes_per_leaf, nodes - at) for at in range(0, nodes, nodes_per_leaf)]
    pods = [leaves[at : at + leaves_per_pod] for at in range(0, len(leaves), leaves_per_pod)]
    share = -(-len(pods) // datacenters)
    return [
        {
            "name": f"dc{d + 1}",
            "pods": [
                {
                    "name": f"p{p}",
                    "leaves": [
                        {
                            "name": f"l{i}",
                            "nodes": count,
                            "gpu_model": gpu_model,
                            "gpus_per_node": gpus_per_node,
                        }
                        for i, count in enumerate(pod, start=1)
                    ],
                }
                for p, pod in enumerate(pods[d * share : (d + 1) * share], start=1)
            ],
        }
        for d in range(datacenters)
        if pods[d * share : (d + 1) * share]
    ]


def _list(data: dict, key: str, where: str) -> list:
    value = data.get(key)
    if not isinstance(value, list):
        raise SpecError(f"{where}: must be a list")
    return value


def _whole(value: Any, where: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"{where}: must be a whole number of at least {minimum}, not {value!r}")
    return value


def _optional_whole(value: Any, where: str) -> int | None:
    return None if value is None else _whole(value, where)


def _nodes(datacenters: list) -> list[Node]:
    nodes: list[Node] = []
    for d, dc in enumerate(datacenters):
        where = f"datacenters[{d}]"
        dc_name = str(dc.get("name", f"dc{d + 1}"))
        region = str(dc.get("region", ""))
        for p, pod in enumerate(_list(dc, "pods", f"{where}.pods")):
            for pod_name, pod_spec in _pods(pod, f"{where}.pods[{p}]", p):
                for leaf_name, model, count, size in _leaves(pod_spec, f"{where}.pods[{p}]"):
                    for n in range(1, count + 1):
                        name = f"{dc_name}-{pod_name}-{leaf_name}-n{n}"
                        nodes.append(
                            Node(
                                len(nodes) + 1,
                                name,
                                model,
                                dc_name,
                                pod_name,
                                leaf_name,
                                size,
                                tuple(range(size)),
                                region=region,
                            )
                        )
    return nodes


def _pods(pod: dict, where: str, index: int) -> list[tuple[str, dict]]:
    count = _whole(pod.get("count", 1), f"{where}.count", 1)
    name = str(pod.get("name", f"p{index + 1}" if "count" not in pod else "p"))
    if "count" not in pod:
        return [(name, pod)]
    return [(f"{name}{i}", pod) for i in range(1, count + 1)]


def _leaves(pod: dict, where: str) -> list[tuple[str, str, int, int]]:
    """(leaf name, GPU model, nodes, GPUs per node) of each leaf of a pod."""
    leaves = pod.get("leaves")
    if isinstance(leaves, int) and not isinstance(leaves, bool):
        count = _whole(pod.get("nodes_per_leaf"), f"{where}.nodes_per_leaf", 1)
        size = _whole(pod.get("gpus_per_node", 8), f"{where}.gpus_per_node", 1)
        model = _model(pod, where)
        return [(f"l{i}", model, count, size) for i in range(1, leaves + 1)]
    if not isinstance(leaves, list):
        raise SpecError(f"{where}.leaves: must be a count or a list of leaves")
    found = []
    for i, leaf in enumerate(leaves):
        at = f"{where}.leaves[{i}]"
        found.append(
            (
                str(leaf.get("name", f"l{i + 1}")),
                _model(leaf, at),
                _whole(leaf.get("nodes"), f"{at}.nodes", 1),
                _whole(leaf.get("gpus_per_node", 8), f"{at}.gpus_per_node", 1),
            )
        )
    return found


def _model(data: dict, where: str) -> str:
    model = data.get("gpu_model")
    if not isinstance(model, str) or not model:
        raise SpecError(f"{where}.gpu_model: must name a GPU model")
    return model


def _quotas(data: Any, where: str) -> tuple[Quota, ...]:
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise SpecError(f"{where}: must map GPU models to quotas")
    quotas = []
    for model, value in sorted(data.items()):
        at = f"{where}.{model}"
        if not isinstance(value, dict):
            quotas.append(Quota(model, _whole(value, at)))
            continue
        nominal = _whole(value.get("nominal", 0), f"{at}.nominal")
        guarantee = _whole(value.get("guarantee", 0), f"{at}.guarantee")
        if guarantee > nominal:
            raise SpecError(f"{at}.guarantee: {guarantee} is more than the nominal {nominal}")
        quotas.append(
            Quota(
                model,
                nominal,
                guarantee=guarantee,
                borrowing_limit=_optional_whole(
                    value.get("borrowing_limit"), f"{at}.borrowing_limit"
                ),
                lending_limit=_optional_whole(value.get("lending_limit"), f"{at}.lending_limit"),
            )
        )
    return tuple(quotas)


def _budget(data: dict, queue_ids: dict[str, int], where: str) -> BudgetSpec:
    if not isinstance(data, dict) or not data.get("name"):
        raise SpecError(f"{where}: must be an object with a name")
    names = _list(data, "queues", f"{where}.queues")
    unknown = [str(name) for name in names if name not in queue_ids]
    if not names or unknown:
        raise SpecError(f"{where}.queues: name queues of the spec ({', '.join(unknown)} unknown)")
    weights = data.get("weights", {})
    if not isinstance(weights, dict) or not all(
        isinstance(w, int | float) and not isinstance(w, bool) and w >= 0 for w in weights.values()
    ):
        raise SpecError(f"{where}.weights: must map GPU models to numbers of at least 0")
    used = data.get("used", 0)
    if isinstance(used, bool) or not isinstance(used, int | float) or used < 0:
        raise SpecError(f"{where}.used: must be a number of at least 0")
    days = _whole(data.get("window_days", 30), f"{where}.window_days", 1)
    rolling = bool(data.get("rolling", False))
    budget = Budget(
        str(data["name"]),
        tuple(queue_ids[name] for name in names),
        float(_whole(data.get("gpu_hours"), f"{where}.gpu_hours")),
        float(used),
        hard=bool(data.get("hard", False)),
        window=f"the last {_days(days)}" if rolling else f"this window of {_days(days)}",
        weights=tuple(sorted((str(m), float(w)) for m, w in weights.items())),
    )
    return BudgetSpec(budget, days * 86400.0, rolling=rolling)


def _days(days: int) -> str:
    return "1 day" if days == 1 else f"{days} days"


def _cohort(data: dict, where: str) -> Cohort:
    if not isinstance(data, dict) or not data.get("name"):
        raise SpecError(f"{where}: must be an object with a name")
    parent = data.get("parent")
    return Cohort(
        str(data["name"]),
        None if parent is None else str(parent),
        _quotas(data.get("quotas"), f"{where}.quotas"),
    )


def _queue(data: dict, queue_id: int, where: str) -> Queue:
    if not isinstance(data, dict) or not data.get("name"):
        raise SpecError(f"{where}: must be an object with a name")
    try:
        strategy = Strategy(data.get("strategy", Strategy.BEST_EFFORT_FIFO.value))
    except ValueError:
        raise SpecError(
            f"{where}.strategy: {data.get('strategy')!r} is not a strategy "
            f"({', '.join(s.value for s in Strategy)})"
        ) from None
    weight = data.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
        raise SpecError(f"{where}.weight: must be a number of at least 0")
    cohort = data.get("cohort")
    return Queue(
        queue_id,
        str(data["name"]),
        _quotas(data.get("quotas"), f"{where}.quotas"),
        cohort=None if cohort is None else str(cohort),
        priority=_int(data.get("priority", 0), f"{where}.priority"),
        weight=float(weight),
        region=str(data.get("region", "")),
        strategy=strategy,
        preemption=_preemption(data.get("preemption", {}), f"{where}.preemption"),
        families=_families(data.get("families"), f"{where}.families"),
    )


def _families(data: Any, where: str) -> tuple[FamilyQuota, ...]:
    """Family quotas: `{"hopper": {"models": ["H800", "H20"], "nominal": 64}}`."""
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise SpecError(f"{where}: must map GPU families to quotas")
    families = []
    for family, value in sorted(data.items()):
        at = f"{where}.{family}"
        models = value.get("models") if isinstance(value, dict) else None
        if not models or not isinstance(models, list):
            raise SpecError(f"{at}.models: must list the family's GPU models")
        families.append(
            FamilyQuota(
                family,
                tuple(str(model) for model in models),
                _whole(value.get("nominal", 0), f"{at}.nominal"),
                _optional_whole(value.get("borrowing_limit"), f"{at}.borrowing_limit"),
            )
        )
    return tuple(families)


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}: must be a whole number, not {value!r}")
    return value


def _preemption(data: dict, where: str) -> PreemptionPolicy:
    """A queue's preemption policy, Kueue's names and values (`PreemptionPolicy`)."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: must be an object")
    default = PreemptionPolicy()
    unknown = sorted(set(data) - set(PreemptionPolicy.__dataclass_fields__))
    if unknown:
        raise SpecError(f"{where}: unknown setting {unknown[0]!r}")
    threshold = data.get("max_priority_threshold")
    return PreemptionPolicy(
        reclaim_within_cohort=_choice(
            ReclaimWithinCohort, data, "reclaim_within_cohort", default, where
        ),
        within_cluster_queue=_choice(
            WithinClusterQueue, data, "within_cluster_queue", default, where
        ),
        borrow_within_cohort=_flag(data, "borrow_within_cohort", default, where),
        max_priority_threshold=None
        if threshold is None
        else _int(threshold, f"{where}.max_priority_threshold"),
        fair_sharing=_choice(FairSharing, data, "fair_sharing", default, where),
        preempt_by_fair_share=_flag(data, "preempt_by_fair_share", default, where),
    )


def _flag(data: dict, key: str, default: object, where: str) -> bool:
    value = data.get(key, getattr(default, key))
    if not isinstance(value, bool):
        raise SpecError(f"{where}.{key}: must be true or false, not {value!r}")
    return value


def _choice(kind: type[StrEnum], data: dict, key: str, default: object, where: str) -> Any:
    value = data.get(key, getattr(default, key))
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(member.value for member in kind)
        raise SpecError(f"{where}.{key}: must be one of {names}, not {value!r}") from None
