"""The inputs a what-if names in words: `philly`, `synthetic:month:...` or a trace CSV, on the
trace's own cluster or a cluster spec JSON. Shared by the command line and the portal.

- `philly`: the Philly trace on its own cluster (`scheduler.sim.philly`); `philly:scale=0.5`
  halves every virtual cluster;
- `synthetic:month[:gpus=N][:days=D][:seed=S]`: `scheduler.sim.synthetic.mixed_month`;
- anything else: a generic trace CSV (`scheduler.sim.trace`), which needs a cluster spec.
"""

from __future__ import annotations

from scheduler.sim.philly import load_philly
from scheduler.sim.spec import ClusterSpec, SpecError, load_spec
from scheduler.sim.synthetic import mixed_month
from scheduler.sim.trace import TraceError, TraceJob, load_csv


def load_inputs(trace: str, cluster: str | None) -> tuple[list[TraceJob], ClusterSpec]:
    """The trace named in words (see the module docstring) and its cluster: the spec JSON at
    `cluster`, or the trace's own when None."""
    spec = load_spec(cluster) if cluster else None
    if trace == "philly" or trace.startswith("philly:scale="):
        try:
            scale = float(trace.partition("=")[2] or 1)
        except ValueError:
            raise TraceError(f"{trace!r}: the scale must be a number") from None
        jobs, own = load_philly(scale=scale)
    elif trace.startswith("synthetic:"):
        jobs, own = synthetic(trace)
    else:
        if spec is None:
            raise SpecError("a trace CSV needs a cluster spec JSON (--cluster)")
        return load_csv(trace, dict(spec.memory_gb)), spec
    return jobs, spec or own


def synthetic(text: str) -> tuple[list[TraceJob], ClusterSpec]:
    """`synthetic:month[:gpus=N][:days=D][:seed=S]`."""
    kind, *options = text.split(":")[1:]
    if kind != "month":
        raise TraceError(f"unknown synthetic trace {kind!r}; known: month")
    values = {"gpus": 100_000, "days": 30.0, "seed": 1}
    for option in options:
        key, _, value = option.partition("=")
        if key not in values:
            raise TraceError(f"unknown option {key!r} of synthetic:month (gpus, days, seed)")
        try:
            values[key] = type(values[key])(value)
        except ValueError:
            raise TraceError(f"synthetic:month option {key}: {value!r} is not a number") from None
    return mixed_month(
        gpus=int(values["gpus"]), days=float(values["days"]), seed=int(values["seed"])
    )
