"""How close the estimated start of a job comes to its real start, replaying the Philly trace.

    python -m bench.eta [--scale 0.25] [--from-day 20] [--days 12] [--every 20] [--short]

The Philly trace (`scheduler.sim.philly`) replays on a quarter of its nodes (88 nodes, 704
GPUs: about half the GPU-hours asked for, in bursts, so jobs wait), faults off, an engine
cycle at most every 10 s. The replay runs twice: first to learn each job's real first start
and its end; then again, and at the submission of every `--every`-th job its estimated start
is computed (`scheduler.sim.eta.estimate`) from the simulator's state at that moment:

- Wanka's estimate: run times guessed from the history of jobs finished by then
  (`scheduler.sim.eta.History`: for a waiting job the mean of the last two of the same virtual
  cluster and GPU count, else of the virtual cluster; for a running one the median of the
  recent ones that ran longer than it has), P90 from the pessimistic pass;
- a Slurm-style estimate in the same run: every job runs to a time limit, its real run time
  rounded up to a request a user would make (1 h, 4 h, 12 h, 1 day, 3 days, 7 days, then
  whole weeks), as Slurm's backfill plan assumes.

Figures are over the sampled jobs that waited under an hour (most wait not at all): the share
whose estimate is within 1 and 10 minutes of the real start, the share whose real start is no
later than the P90 bound, and the Slurm-style share within 10 minutes. Last, one ETA refresh
(both passes) at 100,000 GPUs with 10,000 pending (`bench.engine.scenario`), within its 4 s
budget. `--from-day` and `--days` replay only the jobs submitted in that window: by default
days 20 to 32 (the trace is nearly empty before day 20; these twelve days hold 14,534
jobs and bursts that make hundreds of sampled jobs wait, in about four minutes; the whole
trace, `--from-day 0 --days 110`, takes hours, as every estimate is two forward passes over a
backlog that grows to thousands). `--short`: days 20 to 27 on a tenth of the nodes (where
some jobs do wait), every 10th job. Progress on stderr; the last line is JSON: jobs, within_1min,
within_10min, p90_coverage, slurm_within_10min, the same prefixed `waited_` over the sampled
jobs that waited a minute or more (most wait not at all, and the figures over them all say
little of a waiting job's estimate), eta_pass_s_100k, eta_horizon_h_100k (how far ahead that
refresh saw), eta_estimated_100k (of the 10,000 pending), reference_s (the reference loop,
`bench.reference`, timed first).
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
import time

from bench.engine import NOW, scenario
from bench.reference import reference_s
from scheduler.sim.eta import Bounds, History, estimate, forward
from scheduler.sim.philly import load_philly
from scheduler.sim.policies import make_policy
from scheduler.sim.runner import simulate
from scheduler.sim.simulator import SimConfig, Simulator

DAY = 86400.0
REQUESTS = (3600.0, 4 * 3600.0, 12 * 3600.0, DAY, 3 * DAY, 7 * DAY)


def requested(run_s: float) -> float:
    """The time limit a Slurm user would ask for a job that runs `run_s` seconds."""
    for limit in REQUESTS:
        if run_s <= limit:
            return limit
    return 7 * DAY * -(-run_s // (7 * DAY))


class Observer:
    """The hook of the second replay: estimates at the sampled submissions."""

    def __init__(self, trace, first: Simulator, every: int) -> None:
        self.trace = trace
        self.every = every
        self.next = 0
        ends = sorted(
            (job.finished_at, job.spec.duration_s, job.spec.queue, job.spec.gpus)
            for job in first.jobs.values()
            if job.finished_at is not None
        )
        self.ends = ends
        self.end_times = [end[0] for end in ends]
        self.fed = 0
        self.history = History()
        self.rows: list[tuple] = []

    def __call__(self, sim: Simulator) -> None:
        while self.next < len(self.trace) and self.trace[self.next].id in sim.pending:
            job = self.trace[self.next]
            self.next += 1
            if job.id % self.every == 0:
                self.rows.append((job.id, *self.observe(sim)))

    def observe(self, sim: Simulator) -> tuple:
        now = sim.now
        known = bisect.bisect_right(self.end_times, now)
        for _, run_s, queue, gpus in self.ends[self.fed : known]:
            self.history.add(run_s, (queue, gpus), queue)
        self.fed = max(self.fed, known)
        snapshot = sim.workloads.snapshot(sim.allocations)
        specs = {w.id: sim.jobs[w.id].spec for w in snapshot.workloads}
        ran = {w.id: now - w.started_at for w in snapshot.workloads if w.started_at is not None}
        guesses = {
            i: guess
            for i, s in specs.items()
            if (guess := self.history.guess((s.queue, s.gpus), s.queue, elapsed=ran.get(i, 0)))
            is not None
        }
        ours = estimate(snapshot, now, guesses)
        slurm, _ = forward(snapshot, now, lambda w: (requested(specs[w.id].duration_s), 1.0))
        job_id = self.trace[self.next - 1].id
        return now, ours.start.get(job_id), ours.p90.get(job_id), ours.until, slurm.get(job_id)


def replay(trace, spec, every: int, tell) -> tuple[list[tuple], dict[int, float]]:
    config = SimConfig(failures_per_gpu_hour=0.0, cycle_s=10.0)
    first = simulate(trace, spec, "wanka", config, tell("first replay"))
    starts = {job.id: job.first_start for job in first.jobs.values()}
    observer = Observer(trace, first, every)
    second = Simulator(trace, spec, make_policy("wanka", spec), config, on_event=observer)
    second.run(tell("replay with estimates"))
    return observer.rows, starts


def score(rows, starts) -> dict:
    """The figures over the sampled jobs that waited under an hour, and the same over those of
    them that waited a minute or more (see the docstring)."""
    every, waited = _Tally(), _Tally()
    for job_id, submit, start, p90, until, slurm in rows:
        real = starts[job_id]
        if real is None or real - submit >= 3600:
            continue
        for tally in (every, waited) if real - submit >= 60 else (every,):
            tally.add(real, start, p90, until, slurm)
    return {**every.figures(""), **waited.figures("waited_")}


class _Tally:
    """Counts of estimates against real starts."""

    def __init__(self) -> None:
        self.jobs = self.near1 = self.near10 = self.covered = self.slurm10 = 0

    def add(self, real, start, p90, until, slurm) -> None:
        self.jobs += 1
        self.near1 += start is not None and abs(start - real) <= 60
        self.near10 += start is not None and abs(start - real) <= 600
        self.covered += real <= p90 if p90 is not None else real >= until
        self.slurm10 += slurm is not None and abs(slurm - real) <= 600

    def figures(self, prefix: str) -> dict:
        share = lambda n: round(n / self.jobs, 4) if self.jobs else 0.0  # noqa: E731
        return {
            f"{prefix}jobs": self.jobs,
            f"{prefix}within_1min": share(self.near1),
            f"{prefix}within_10min": share(self.near10),
            f"{prefix}p90_coverage": share(self.covered),
            f"{prefix}slurm_within_10min": share(self.slurm10),
        }


def pass_at_100k() -> tuple[float, float, int]:
    """Seconds for one refresh at 100,000 GPUs / 10,000 pending (the portal's bounds), hours
    it saw ahead, pending jobs it estimated."""
    snapshot = scenario(100_000, 7)
    pending = {w.id for w in snapshot.workloads if not w.is_running}
    started = time.perf_counter()
    result = estimate(snapshot, NOW, {}, Bounds(), clock=time.perf_counter)
    seconds = time.perf_counter() - started
    return seconds, (result.until - NOW) / 3600, len(pending & result.start.keys())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--from-day", type=float, default=20.0)
    parser.add_argument("--days", type=float, default=12.0, help="only jobs of DAYS from then")
    parser.add_argument("--every", type=int, default=20, help="estimate every N-th job")
    parser.add_argument(
        "--short", action="store_true", help="days 20 to 27 on a tenth of the nodes, every 10th job"
    )
    args = parser.parse_args(argv)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr, flush=True)
    first, days, every = (20.0, 7.0, 10) if args.short else (args.from_day, args.days, args.every)
    trace, spec = load_philly(scale=0.1 if args.short else args.scale)
    last = (first + days) * DAY
    trace = [job for job in trace if first * DAY <= job.submit_s < last]
    print(f"{len(trace)} jobs on {len(spec.nodes)} nodes", file=sys.stderr)

    def tell(what: str):
        return lambda now: print(f"{what}: day {now / DAY:.1f}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    rows, starts = replay(trace, spec, every, tell)
    figures = score(rows, starts)
    waited = sum(1 for r in rows if starts[r[0]] is not None and starts[r[0]] - r[1] > 60)
    print(f"sampled {len(rows)} jobs, {waited} waited over a minute", file=sys.stderr)
    seconds, hours, estimated = pass_at_100k()
    figures["eta_pass_s_100k"] = round(seconds, 2)
    figures["eta_horizon_h_100k"] = round(hours, 2)
    figures["eta_estimated_100k"] = estimated
    print(
        " ".join(f"{key}={value}" for key, value in figures.items()),
        f"wall_s={time.perf_counter() - started:.0f}",
    )
    print(json.dumps({**figures, "reference_s": reference}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
