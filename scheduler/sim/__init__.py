"""What-if simulation with the production engine: a discrete-event simulator, trace loaders,
synthetic load, baseline policies, metrics and reports.

    from scheduler.sim import SimConfig, load_philly, run, write_html
    trace, cluster = load_philly()
    results = run(trace, cluster, ["wanka", "fifo"], config=SimConfig(seed=1),
                  on_progress=lambda fraction, message: ...)
    write_html(results, "report.html")

`run` returns a JSON-ready dict of every figure per policy; `python -m scheduler.sim` is the
command line.
"""

from scheduler.sim.inputs import load_inputs
from scheduler.sim.philly import load_philly
from scheduler.sim.policies import POLICIES
from scheduler.sim.report import write_html
from scheduler.sim.runner import run, simulate
from scheduler.sim.services import Service
from scheduler.sim.simulator import SimConfig, Simulator
from scheduler.sim.spec import ClusterSpec, SpecError, load_spec, parse_spec
from scheduler.sim.synthetic import inference_service, mixed_month, training_job
from scheduler.sim.trace import TraceError, TraceJob, load_csv, read_csv, write_csv

__all__ = [
    "POLICIES",
    "ClusterSpec",
    "SimConfig",
    "Simulator",
    "Service",
    "SpecError",
    "TraceError",
    "TraceJob",
    "inference_service",
    "load_csv",
    "load_inputs",
    "load_philly",
    "load_spec",
    "mixed_month",
    "parse_spec",
    "read_csv",
    "run",
    "simulate",
    "training_job",
    "write_csv",
    "write_html",
]
