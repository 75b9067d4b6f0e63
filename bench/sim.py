"""How fast the simulator replays: the whole Philly trace on its own cluster, and a synthetic
month on a 100,000-GPU site, each under Wanka's policy with the production engine.

    python -m bench.sim [--cases philly,month] [--seed 1]

- `philly`: 82,247 jobs over 109 days on 352 nodes of 8 GPUs (`scheduler.sim.philly`), an
  engine cycle at most every 10 s;
- `month`: `scheduler.sim.synthetic.mixed_month` (about 13,500 jobs: gangs of up to 8,192 GPUs,
  post-training, fine-tuning, batch work and two inference services with a daily peak and
  valley) over 30 days on 12,500 nodes, an engine cycle at most every `--month-cycle-s`.

Both with faults at the Llama 3 rate. Each case runs in a process of its own, so that its
peak memory is its own. One line per case, then one JSON line: per case `jobs`, `sim_days`
(simulated days, to the last event), `wall_s` (the simulation, not loading the trace),
`events`, `events_per_s`, `cycles`, `cycle_s`, `peak_rss_mb`, `reference_s` (the reference loop,
`bench.reference`, timed just before and just after the case and averaged, as a shared machine's
speed drifts over a replay of minutes) and `wall_ref` (`wall_s` in those reference loops; target
for `philly`: at most 50), and `reference_s`, the mean of the cases' reference loops.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from bench import processes
from bench.reference import in_loops, reference_s
from scheduler.sim.philly import load_philly
from scheduler.sim.runner import simulate
from scheduler.sim.simulator import SimConfig
from scheduler.sim.synthetic import mixed_month

CASES = ("philly", "month")


def measure(case: str, seed: int, month_cycle_s: float) -> dict:
    """Load and replay one case; its figures."""
    if case == "philly":
        trace, spec = load_philly()
        cycle_s = 10.0
    else:
        trace, spec = mixed_month(gpus=100_000, days=30, seed=seed)
        cycle_s = month_cycle_s
    started = time.perf_counter()
    simulator = simulate(trace, spec, "wanka", SimConfig(seed=seed, cycle_s=cycle_s))
    wall = time.perf_counter() - started
    return {
        "case": case,
        "jobs": len(trace),
        "gpus": spec.gpus,
        "sim_days": round((simulator.end - simulator.start) / 86400, 2),
        "wall_s": round(wall, 1),
        "events": simulator.events,
        "events_per_s": round(simulator.events / wall),
        "cycles": simulator.recorder.cycles,
        "cycle_s": cycle_s,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--month-cycle-s", type=float, default=60.0)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds in all")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # run one case here (the child)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.seed, args.month_cycle_s)))
        return 0
    processes.supervise(args.timeout)
    reference = reference_s()
    print(f"reference loop: {reference} s", flush=True)
    figures = {}
    references = []
    for case in args.cases.split(","):
        if case not in CASES:
            parser.error(f"unknown case {case!r}; known: {', '.join(CASES)}")
        child = processes.start(
            [
                sys.executable,
                "-m",
                "bench.sim",
                "--one",
                case,
                "--seed",
                str(args.seed),
                "--month-cycle-s",
                str(args.month_cycle_s),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        with processes.waiting_for(f"the {case} replay"):
            out, _ = child.communicate()
        if child.returncode:
            raise SystemExit(f"the {case} replay exited with {child.returncode}")
        after = reference_s()
        figures[case] = json.loads(out.strip().splitlines()[-1])
        figures[case]["reference_s"] = round((reference + after) / 2, 3)
        figures[case]["wall_ref"] = in_loops(figures[case]["wall_s"], (reference + after) / 2)
        references.append(figures[case]["reference_s"])
        print(" ".join(f"{key}={value}" for key, value in figures[case].items()), flush=True)
        reference = after
    mean = round(sum(references) / len(references), 3) if references else reference
    print(json.dumps({**figures, "reference_s": mean}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
