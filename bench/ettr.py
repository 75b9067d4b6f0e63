"""Issue 5's ETTR table, reproduced by the simulator: every checkpoint policy for one job of
16,384 and one of 100,000 GPUs, simulated against the model of `scheduler.checkpointing`.

    python -m bench.ettr [--days 2000] [--seed 1]

Each job runs on a cluster of its own size with failures exponential at 1 per 50,700
GPU-hours, the reference costs (periodic save 5 min; async 10 s stall + 5 min persist; restart
2 min; triggered save 30 s, possible for 95 % of faults, losing half a 10 s step) and the
advisor's interval (`scheduler.sim.ettr`). Checks: the periodic policy matches Daly's closed
form within 0.01 at both sizes; the other policies match the first-order model within 0.01
at 16,384 GPUs; the fault-triggered policy reaches 0.96 at 16,384 GPUs and 0.85 at 100,000.
Prints a Markdown table, then one JSON line with every figure, `checks_passed` and
`reference_s` (the reference loop, `bench.reference`, timed first); exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.reference import reference_s
from scheduler.checkpointing import PolicyKind, duration
from scheduler.sim.ettr import EttrResult, simulated_ettr

SIZES = (16_384, 100_000)
TOLERANCE = 0.01
TRIGGERED_FLOOR = {16_384: 0.96, 100_000: 0.85}


def checks(results: list[EttrResult]) -> list[str]:
    """The checks that fail, in words."""
    failed = []
    for r in results:
        must_match = r.kind is PolicyKind.PERIODIC or r.gpus == SIZES[0]
        if must_match and r.error > TOLERANCE:
            failed.append(
                f"{r.kind.value} at {r.gpus:,} GPUs: simulated {r.simulated:.4f}, "
                f"model {r.model:.4f}"
            )
        floor = TRIGGERED_FLOOR.get(r.gpus)
        if r.kind is PolicyKind.TRIGGERED and floor is not None and r.simulated < floor:
            failed.append(f"triggered at {r.gpus:,} GPUs: {r.simulated:.4f} < {floor}")
    return failed


def table(results: list[EttrResult]) -> str:
    header = ["policy"]
    for gpus in SIZES:
        header += [f"interval @ {gpus:,}", f"simulated @ {gpus:,}", f"model @ {gpus:,}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for kind in PolicyKind:
        row = [kind.value]
        for gpus in SIZES:
            r = next(r for r in results if r.kind is kind and r.gpus == gpus)
            row += [
                duration(r.interval_s) if r.interval_s else "-",
                f"{r.simulated:.3f}",
                f"{r.model:.3f}",
            ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--days",
        type=float,
        default=2000.0,
        help="simulated days per policy and size (default 2000)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    reference = reference_s()
    print(f"reference loop: {reference} s", file=sys.stderr)
    started = time.perf_counter()
    results = [
        simulated_ettr(kind, gpus, days=args.days, seed=args.seed)
        for gpus in SIZES
        for kind in PolicyKind
    ]
    print(table(results))
    failed = checks(results)
    for failure in failed:
        print(f"check failed: {failure}", file=sys.stderr)
    print(
        json.dumps(
            {
                "days": args.days,
                "seed": args.seed,
                "results": [
                    {
                        "policy": r.kind.value,
                        "gpus": r.gpus,
                        "interval_s": r.interval_s,
                        "simulated": round(r.simulated, 4),
                        "model": round(r.model, 4),
                        "faults": r.faults,
                    }
                    for r in results
                ],
                "checks_passed": not failed,
                "wall_s": round(time.perf_counter() - started, 1),
                "reference_s": reference,
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
