"""Run a what-if simulation from the command line.

    python -m scheduler.sim --trace philly --policy wanka --policy fifo \\
        --report out.html --json out.json
    python -m scheduler.sim --trace jobs.csv --cluster cluster.json --policy wanka
    python -m scheduler.sim --trace synthetic:month:gpus=100000:days=30 --report month.html
    python -m scheduler.sim --trace philly --service-share 0.3 --report tide.html

`--trace` is `philly` (the Philly trace on its own cluster; `philly:scale=0.5` halves every
virtual cluster), `synthetic:month` (a mixed month
on a site, options `gpus`, `days` and `seed` after colons) or a generic trace CSV (see
`scheduler.sim.trace`), which needs `--cluster`, a cluster spec JSON (see
`scheduler.sim.spec`). `--cluster` also replaces the cluster of `philly` or `synthetic`.
Without `--policy`, every policy runs. `--service-share 0.3` adds the Azure conversation
service beside the trace, its peak needing 30 % of the cluster (`runner.with_service`); such a
run stops a day after the trace's first submission unless `--horizon-days` says when, and its
report draws the tide. `--defrag scattered` (or a daily `02:00`, or both) turns scheduled
defragmentation on (`scheduler.sim.defrag`), within `--defrag-moves` per hour per pod.
Progress goes to stderr; errors in the inputs exit with status 2 and say where they are.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scheduler.checkpointing import FAILURES_PER_GPU_HOUR
from scheduler.sim.defrag import Defrag, parse_when
from scheduler.sim.inputs import load_inputs
from scheduler.sim.policies import POLICIES
from scheduler.sim.report import write_html
from scheduler.sim.runner import run
from scheduler.sim.simulator import SimConfig
from scheduler.sim.spec import ClusterSpec, SpecError
from scheduler.sim.trace import TraceError, parse_policy


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scheduler.sim", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--trace", help="philly, synthetic:month[...] or a CSV")
    parser.add_argument("--cluster", help="cluster spec JSON")
    parser.add_argument(
        "--policy",
        action="append",
        choices=list(POLICIES),
        help="a policy to run (repeat for several; default: all)",
    )
    parser.add_argument("--report", type=Path, help="write the HTML report here")
    parser.add_argument("--json", type=Path, help="write every figure as JSON here")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cycle-s",
        type=float,
        default=10.0,
        help="shortest time between engine cycles (default 10)",
    )
    parser.add_argument(
        "--failures-per-gpu-hour",
        type=float,
        default=FAILURES_PER_GPU_HOUR,
        help="fault rate (default Llama 3's, 1/50,700; 0 for none)",
    )
    parser.add_argument(
        "--checkpoint",
        default="periodic",
        help="policy of jobs whose trace names none, e.g. async or "
        "periodic:3600 (default periodic, interval from the advisor)",
    )
    parser.add_argument(
        "--time-limits",
        action="store_true",
        help="tell the engine each job's duration as its time limit",
    )
    parser.add_argument("--horizon-days", type=float, help="stop after this many days")
    parser.add_argument(
        "--service-share",
        type=float,
        help="add the Azure conversation service, its peak needing this share of the "
        "cluster's GPUs, e.g. 0.3 (the run then stops after a day, unless --horizon-days)",
    )
    parser.add_argument(
        "--defrag",
        help="scheduled defragmentation: scattered (whenever free GPUs are scattered), a "
        "daily time HH:MM (for an hour from then; the trace starts at midnight), or both: "
        "scattered,02:00",
    )
    parser.add_argument(
        "--defrag-moves", type=int, default=4, help="moves per hour per pod (default 4)"
    )
    parser.add_argument(
        "--defrag-pods", help="the pods to defragment, comma separated (default every pod)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--title", help="the report's title")
    parser.add_argument(
        "--results",
        type=Path,
        help="draw the report from a JSON written by --json earlier, without simulating",
    )
    args = parser.parse_args(argv)
    if not args.trace and not args.results:
        parser.error("give --trace (or --results to redraw a report)")
    if args.service_share is not None and not 0 < args.service_share < 1:
        parser.error("--service-share must be above 0 and below 1")
    return args


def _defrag(args: argparse.Namespace, spec: ClusterSpec) -> Defrag | None:
    if args.defrag is None:
        return None
    scattered, at = parse_when(args.defrag)
    pods = tuple(p.strip() for p in (args.defrag_pods or "").split(",") if p.strip())
    unknown = sorted(set(pods) - {node.pod for node in spec.nodes})
    if unknown:
        raise ValueError(f"--defrag-pods: the cluster has no pod {', '.join(unknown)}")
    return Defrag(pods, args.defrag_moves, scattered, at)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.results:
        results = json.loads(args.results.read_text())
        write_html(
            results,
            args.report or args.results.with_suffix(".html"),
            title=args.title or f"What-if: {results['cluster']['name']}",
        )
        return 0
    try:
        trace, spec = load_inputs(args.trace, args.cluster)
        config = SimConfig(
            seed=args.seed,
            cycle_s=args.cycle_s,
            failures_per_gpu_hour=args.failures_per_gpu_hour,
            checkpoint=parse_policy(args.checkpoint),
            time_limits=args.time_limits,
            horizon_s=None if args.horizon_days is None else args.horizon_days * 86400,
            defrag=_defrag(args, spec),
        )
    except (TraceError, SpecError, ValueError, OSError) as why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        results = run(
            trace,
            spec,
            args.policy or list(POLICIES),
            config=config,
            on_progress=None if args.quiet else _print_progress,
            service_share=args.service_share,
        )
    except SpecError as why:  # the service does not fit the cluster's queues
        print(f"error: {why}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.report:
        write_html(
            results, args.report, title=args.title or f"What-if: {args.trace} on {spec.name}"
        )
    for name, figures in results["policies"].items():
        print(
            f"{name}: allocated {figures['utilization']['allocated']:.1%}, mean wait "
            f"{figures['wait_s']['mean']:.0f} s, p95 {figures['wait_s']['p95']:.0f} s, "
            f"large gangs {figures['large_gangs']['wait_s']['mean']:.0f} s" + _service_line(figures)
        )
    return 0


def _service_line(figures: dict) -> str:
    if "service" not in figures:
        return ""
    return f", service requests finding room {figures['service']['slo_attainment']:.2%}"


def _print_progress(fraction: float, message: str) -> None:
    print(f"\r{fraction:6.1%} {message:40}", end="", file=sys.stderr, flush=True)
    if fraction >= 1:
        print(file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
