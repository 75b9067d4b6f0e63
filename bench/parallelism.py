"""The parallelism planner against published training runs, its speed, and one resize.

    python -m bench.parallelism [--short] [--check]

1. Every published measurement we found with its full configuration (`bench.published`),
   predicted with the same TP, PP, GPU count, batch and software (the planner picks what the
   source leaves open: micro-batch, interleaving, recompute); one line each with the error of
   the planner's constants (fitted to all of them: in-sample) and of constants fitted to every
   other source (leave one source out: how it does on runs it has never seen), then both
   summed up, and each source's. `--short` searches the constants more coarsely.
2. Re-planning time (the whole ranked search) at 1,024 and 16,384 GPUs on one core: the
   slowest of GPT-3 175B, Llama 3 405B and Llama 3 8B.
3. GPT-3 175B on H800 nodes: the plan on 1,000 GPUs, then on the 896 (112 whole nodes) left when
   only 900 are there, the throughput and the batch kept.

The last line is JSON: rows, sources, mean_err, max_err (in-sample), cv_mean_err, cv_max_err,
cv_signed_err (leave one source out), replan_s_1k, replan_s_16k, batch_kept,
throughput_kept_1000_to_900, gpus_kept_1000_to_900, and reference_s (the reference loop,
`bench.reference`, timed first). With --check it exits 1 when a target is missed: at least 60
runs from 8 sources, in-sample mean error <= 7 %, cross-validated mean <= 7 % (so that it gets
no worse; the goal is 6 %), re-plan at 16,384 GPUs <= 50 ms, the batch kept and at least 88 %
of the throughput kept.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import replace

from bench.published import PUBLISHED, Published
from bench.reference import reference_s
from scheduler.parallelism import FIT, GPUS, MODELS, Fit, Gpu, evaluate, layouts, plan, plans

# What a fit may move, and the range it searches: the time model's constants (`Fit`) and each
# GPU generation's GEMM efficiency.
RANGES = {
    "elementwise_passes": (1.0, 6.0),
    "attention_efficiency": (0.5, 1.0),
    "straggler": (0.0, 0.05),
    "iteration_overhead_s": (0.0, 0.5),
    "tp_exposed": (0.0, 1.0),
    "A100": (0.6, 0.85),  # large BF16 GEMMs reach 75-85 % of peak on either
    "H100": (0.6, 0.85),
}
SEARCH = {"full": (3, 14), "short": (2, 9)}  # passes over the constants, steps along each


def predict(row: Published, fit: Fit = FIT, gpus: dict[str, Gpu] = GPUS) -> float:
    """The planner's iteration time for a published run, its layout as the source fixes it
    (what the source leaves open, the planner picks). A layout the run used but the memory
    model refuses (`overflows`) is timed all the same: the run shows it fits."""
    gpu = _gpu(row, gpus)
    found = plans(
        row.model, gpu, row.gpus, row.batch, stack=row.stack, fit=fit, limit=1, **row.fixed
    )
    if found:
        return found[0].iteration_s
    candidates = layouts(row.model, gpu, row.gpus, row.batch, stack=row.stack, **row.fixed)
    return min(
        evaluate(row.model, gpu, row.batch, layout, stack=row.stack, fit=fit).iteration_s
        for layout in candidates
    )


def _gpu(row: Published, gpus: dict[str, Gpu]) -> Gpu:
    """The run's GPU type, with its cluster's network where the source gives another."""
    gpu = gpus[row.gpu]
    return replace(gpu, network_gbps=row.network_gbps) if row.network_gbps else gpu


def overflows(rows=PUBLISHED) -> list[Published]:
    """Published runs whose layout the planner's memory model says does not fit."""
    return [
        r
        for r in rows
        if not plans(r.model, _gpu(r, GPUS), r.gpus, r.batch, stack=r.stack, limit=1, **r.fixed)
    ]


def validation(rows=PUBLISHED, fit: Fit = FIT, gpus=GPUS) -> list[tuple[Published, float, float]]:
    """(row, published seconds, predicted seconds) for every row."""
    return [(row, row.published_s(), predict(row, fit, gpus)) for row in rows]


def loss(rows, fit: Fit, gpus) -> float:
    """Root mean square log error (a miss by a factor weighs the same either way, and a large
    miss more than several small ones: the goal bounds the largest error as well as the mean),
    each source weighing the same however many runs it publishes."""
    by_source: dict[str, list[float]] = {}
    for row, published, predicted in validation(rows, fit, gpus):
        by_source.setdefault(row.source, []).append(math.log(predicted / published) ** 2)
    return math.sqrt(statistics.mean(statistics.mean(errors) for errors in by_source.values()))


def constants(values: dict[str, float]) -> tuple[Fit, dict[str, Gpu]]:
    """The Fit and the GPU table that `values` (names of RANGES) make."""
    fit = replace(FIT, **{k: v for k, v in values.items() if k in Fit.__dataclass_fields__})
    gpus = dict(GPUS)
    for name, gpu in GPUS.items():
        generation = "A100" if name == "A100" else "H100"  # Hopper and later share H100's
        if generation in values:
            gpus[name] = replace(gpu, gemm_efficiency=values[generation])
    return fit, gpus


def fitted(rows, search: str = "full") -> dict[str, float]:
    """The constants that best reproduce `rows`: a few passes of golden-section search along
    each constant in turn, from the middle of each range (never from the planner's own, which
    have seen every source)."""
    sweeps, steps = SEARCH[search]
    values = {name: (low + high) / 2 for name, (low, high) in RANGES.items()}
    for _ in range(sweeps):
        for name, (low, high) in RANGES.items():

            def along(value, name=name):
                return loss(rows, *constants({**values, name: value}))

            values[name] = _golden(along, low, high, steps)
    return values


def _golden(f, low: float, high: float, steps: int) -> float:
    ratio = (math.sqrt(5) - 1) / 2
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = f(a), f(b)
    for _ in range(steps):
        if fa < fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = f(a)
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = f(b)
    return (low + high) / 2


def cross_validation(rows=PUBLISHED, search="full") -> list[tuple[Published, float, float]]:
    """Leave one source out: each source's runs predicted by constants fitted to all the
    other sources' runs."""
    out = []
    for source in dict.fromkeys(r.source for r in rows):
        held = [r for r in rows if r.source == source]
        values = fitted([r for r in rows if r.source != source], search)
        out += validation(held, *constants(values))
    return out


def _summary(found) -> dict[str, float]:
    errors = [p / s - 1 for _, s, p in found]
    return {
        "mean": statistics.mean(abs(e) for e in errors),
        "max": max(abs(e) for e in errors),
        "signed": statistics.mean(errors),
    }


REPLANNED = (("gpt3-175b", 1536), ("llama3-405b", 2048), ("llama3-8b", 16384))


def replan_s(gpus: int, repeat: int) -> float:
    """The slowest, over a few catalogue models, of the median time of a whole ranked search
    on `gpus` H800 GPUs."""
    slowest = 0.0
    for name, batch in REPLANNED:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            plan(MODELS[name], GPUS["H800"], gpus, batch)
            times.append(time.perf_counter() - start)
        slowest = max(slowest, statistics.median(times))
    return slowest


TARGETS = {"mean_err": 0.07, "cv_mean_err": 0.07, "replan_s_16k": 0.05}  # at most
LEAST = {"rows": 60, "sources": 8}
GOAL = {"cv_mean_err": 0.06, "cv_max_err": 0.15, "cv_signed_err": 0.03}  # |signed| too


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="one timing run instead of five")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    reference = reference_s()
    print(f"reference loop: {reference} s")

    rows, held_out = validation(), cross_validation(search="short" if args.short else "full")
    print(f"{'source':44} {'run':34} {'published s':>11} {'fitted':>8} {'left out':>8}")
    for (row, published, predicted), (_, _, unseen) in zip(rows, held_out, strict=True):
        print(
            f"{row.source[:44]:44} {row.name[:34]:34} {published:11.2f} "
            f"{predicted / published - 1:+8.1%} {unseen / published - 1:+8.1%}"
        )
    inside, outside = _summary(rows), _summary(held_out)
    sources = len({row.source for row, _, _ in rows})
    refused = overflows()
    print(
        f"published layouts the memory model refuses (timed all the same): {len(refused)}"
        + "".join(f"; {row.source}: {row.name}" for row in refused)
    )
    for source in dict.fromkeys(row.source for row, _, _ in rows):
        mine = _summary([r for r in held_out if r[0].source == source])
        print(
            f"left out, {source[:56]:56} mean {mine['mean']:6.1%}, max {mine['max']:6.1%}, "
            f"signed {mine['signed']:+6.1%}"
        )
    for label, summary in (("fitted to all", inside), ("each source left out", outside)):
        print(
            f"{label}: mean |error| {summary['mean']:.1%}, max {summary['max']:.1%}, "
            f"signed {summary['signed']:+.1%}; {len(rows)} runs from {sources} sources"
        )

    repeat = 1 if args.short else 5
    replan_1k, replan_16k = replan_s(1024, repeat), replan_s(16384, repeat)
    print(
        f"re-plan, slowest of {', '.join(name for name, _ in REPLANNED)}: "
        f"{replan_1k * 1000:.0f} ms at 1,024 GPUs, {replan_16k * 1000:.0f} ms at 16,384"
    )

    model, gpu, batch = MODELS["gpt3-175b"], GPUS["H800"], 1536
    before, after = plan(model, gpu, 1000, batch), plan(model, gpu, 896, batch)
    for label, p in (("1,000 GPUs", before), ("896 GPUs", after)):
        print(
            f"{label}: {p.shape}, micro-batches of {p.layout.micro_batch}: {p.micro_batches} "
            f"per replica ({p.larger_shares} replicas take the larger share), "
            f"{p.layout.recompute} recompute, {p.tokens_per_s:,.0f} tokens/s, MFU {p.mfu:.1%}, "
            f"{p.memory_gib:.1f} GiB"
        )
    kept = after.tokens_per_s / before.tokens_per_s
    total = after.sequences[0] * after.larger_shares + after.sequences[1] * (
        after.layout.dp - after.larger_shares
    )
    print(
        f"throughput kept {kept:.1%} with {896 / 1000:.1%} of the GPUs; "
        f"global batch {total} of {batch}"
    )
    figures = {
        "rows": len(rows),
        "sources": sources,
        "mean_err": round(inside["mean"], 4),
        "max_err": round(inside["max"], 4),
        "cv_mean_err": round(outside["mean"], 4),
        "cv_max_err": round(outside["max"], 4),
        "cv_signed_err": round(outside["signed"], 4),
        "replan_s_1k": round(replan_1k, 4),
        "replan_s_16k": round(replan_16k, 4),
        "batch_kept": total == batch,
        "throughput_kept_1000_to_900": round(kept, 4),
        "gpus_kept_1000_to_900": 0.896,
        "reference_s": reference,
    }
    short = [k for k, most in GOAL.items() if abs(figures[k]) > most]
    print(
        f"the goal ({', '.join(f'{k} <= {v}' for k, v in GOAL.items())}): "
        + (f"not met ({', '.join(short)})" if short else "met")
    )
    print(json.dumps(figures))
    missed = [k for k, most in TARGETS.items() if figures[k] > most]
    missed += [k for k, least in LEAST.items() if figures[k] < least]
    if not figures["batch_kept"]:
        missed.append("batch_kept")
    if kept < 0.88:  # the 90 % of the GPUs asked for, less two points
        missed.append("throughput_kept_1000_to_900")
    if args.check and missed:
        raise SystemExit(f"missed targets: {', '.join(missed)}")


if __name__ == "__main__":
    main()
