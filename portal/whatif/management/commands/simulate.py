import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from portal.whatif.choices import ClusterSource, TraceSource
from portal.whatif.models import WhatIfRun
from portal.whatif.runs import defragmentation, inputs, take_history
from scheduler.sim.policies import POLICIES
from scheduler.sim.report import write_html
from scheduler.sim.runner import run
from scheduler.sim.simulator import SimConfig
from scheduler.sim.spec import SpecError
from scheduler.sim.trace import TraceError


class Command(BaseCommand):
    help = (
        "Run a what-if simulation with the production engine and write a report. "
        "--trace philly|synthetic|history|FILE.csv, --cluster trace|current|FILE.json "
        "(history: this cluster's last --days days, default 7, on this cluster)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--trace", required=True)
        parser.add_argument(
            "--cluster", default=None, help="trace (its own), current (this cluster) or a spec JSON"
        )
        parser.add_argument("--policy", action="append", choices=list(POLICIES))
        parser.add_argument("--days", type=float, help="only the trace's first days")
        parser.add_argument("--gpus", type=int, help="synthetic: the site's GPUs")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--service-share",
            type=float,
            help="add the Azure conversation service, its peak needing this share of the "
            "cluster's GPUs, e.g. 0.3 (the run then covers the trace's first day)",
        )
        parser.add_argument(
            "--defrag",
            default="",
            help="defragment every pod: scattered, a daily HH:MM, or both (scattered,02:00)",
        )
        parser.add_argument("--defrag-moves", type=int, default=4, help="moves per hour per pod")
        parser.add_argument("--report", type=Path)
        parser.add_argument("--json", type=Path, dest="json_path")

    def handle(self, *args, trace, cluster, policy, days, gpus, seed, report, json_path, **options):
        whatif = WhatIfRun(
            seed=seed,
            days=days,
            gpus=gpus,
            policies=policy or list(POLICIES),
            defrag=options["defrag"],
            defrag_moves=options["defrag_moves"],
        )
        if trace in TraceSource.values and trace != TraceSource.CSV:
            whatif.trace = trace
        else:
            whatif.trace, whatif.trace_csv = TraceSource.CSV, _read(trace)
        if cluster in (None, ClusterSource.TRACE, ClusterSource.CURRENT):
            whatif.cluster = cluster or ClusterSource.TRACE
        else:
            whatif.cluster, whatif.cluster_json = ClusterSource.JSON, _read(cluster)
        if whatif.trace == TraceSource.HISTORY and not take_history(whatif):
            raise CommandError(f"no workload was submitted in the last {whatif.days:g} days")
        try:
            jobs, spec = inputs(whatif)
            results = run(
                jobs,
                spec,
                whatif.policies,
                config=SimConfig(seed=seed, defrag=defragmentation(whatif)),
                on_progress=self._progress,
                service_share=options["service_share"],
            )
        except (TraceError, SpecError, ValueError) as error:
            raise CommandError(str(error)) from None
        self.stderr.write("")
        if report:
            write_html(results, report)
            self.stdout.write(f"report: {report}")
        if json_path:
            json_path.write_text(json.dumps(results, indent=1, sort_keys=True))
            self.stdout.write(f"figures: {json_path}")
        for name, figures in results["policies"].items():
            self.stdout.write(f"{name}: {_line(figures)}")

    def _progress(self, fraction: float, message: str) -> None:
        bar = "#" * int(30 * fraction)
        self.stderr.write(f"\r[{bar:<30}] {100 * fraction:5.1f}% {message:<40}", ending="")


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as error:
        raise CommandError(f"{path}: {error.strerror}") from None


def _line(figures: dict) -> str:
    waits = figures["wait_s"]
    return (
        f"{figures['finished']:,} of {figures['jobs']:,} jobs finished, GPUs allocated "
        f"{100 * figures['utilization']['allocated']:.1f} %, wait mean "
        f"{waits['mean']:.0f} s, p95 {waits['p95']:.0f} s"
    )
