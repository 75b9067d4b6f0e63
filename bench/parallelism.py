"""The parallelism planner against published training runs, its speed, and one resize.

    python -m bench.parallelism [--short] [--check]

1. Every published measurement we found with its full configuration, predicted with the same
   TP, PP, GPU count, batch and software (the planner picks what the source leaves open:
   micro-batch, interleaving, recompute); one line each with the error.
2. Re-planning time (the whole ranked search) at 1,024 and 16,384 GPUs on one core: the
   slowest of GPT-3 175B, Llama 3 405B and Llama 3 8B.
3. GPT-3 175B on H800 nodes: the plan on 1,000 GPUs, then on the 896 (112 whole nodes) left when
   only 900 are there, the throughput and the batch kept.

The last line is JSON: rows, mean_err, max_err, replan_s_1k, replan_s_16k, batch_kept,
throughput_kept_1000_to_900, gpus_kept_1000_to_900, and reference_s (the reference loop,
`bench.reference`, timed first). With --check it exits 1 when a target is
missed: mean_err <= 0.05, max_err <= 0.10, replan_s_16k <= 1, the batch kept, and at least 88 %
of the throughput kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass, field

from bench.reference import reference_s
from scheduler.parallelism import (
    GPUS,
    MODELS,
    STACK_2021,
    ModelSpec,
    Recompute,
    Stack,
    gpt,
    plan,
)

KORTHIKANTI_FULL = STACK_2021
KORTHIKANTI_SELECTIVE = Stack(overlap=False, sequence_parallel=True, flash_attention=False)


@dataclass(frozen=True)
class Published:
    """One published run: its configuration and the figure it reports."""

    source: str
    model: ModelSpec
    gpu: str
    gpus: int
    batch: int
    fixed: dict = field(default_factory=dict)
    stack: Stack = Stack()
    iteration_s: float | None = None  # reported directly
    tflops: float | None = None  # per GPU, counting recomputed FLOPs when `recomputed`
    recomputed: bool = False

    def published_s(self) -> float:
        """The reported iteration time, or the one the reported TFLOP/s imply."""
        if self.iteration_s is not None:
            return self.iteration_s
        flops = self.batch * (
            _narayanan_flops(self.model) if self.recomputed else self.model.flops_per_sequence()
        )
        return flops / (self.tflops * 1e12 * self.gpus)


def _narayanan_flops(model: ModelSpec) -> float:
    """FLOPs of a sequence with full recompute, Narayanan et al. eq. 3: 96slh^2(1+s/6h+V/16lh)."""
    s, n, h, v = model.seq, model.layers, model.hidden, model.vocab
    return 96 * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def _narayanan(name, layers, hidden, heads, tp, pp, gpus, batch, tflops) -> Published:
    return Published(
        f"Narayanan et al. SC'21, Table 1: {name}",
        gpt(name, layers, hidden, heads),
        "A100",
        gpus,
        batch,
        {"tp": tp, "pp": pp, "recompute": Recompute.FULL, "distributed_optimizer": False},
        STACK_2021,
        tflops=tflops,
        recomputed=True,
    )


def _korthikanti(name, layers, hidden, heads, pp, gpus, batch, mbs, vp, full_s, selective_s):
    model = gpt(name, layers, hidden, heads)
    common = {"tp": 8, "pp": pp, "vp": vp, "micro_batch": mbs, "distributed_optimizer": False}
    runs = (
        ("full recompute", Recompute.FULL, KORTHIKANTI_FULL, full_s),
        ("sequence parallel + selective", Recompute.SELECTIVE, KORTHIKANTI_SELECTIVE, selective_s),
    )
    return [
        Published(
            f"Korthikanti et al. 2022, Table 5: {name}, {label}",
            model,
            "A100",
            gpus,
            batch,
            {**common, "recompute": recompute},
            stack,
            iteration_s=seconds,
        )
        for label, recompute, stack, seconds in runs
    ]


PUBLISHED: list[Published] = [
    _narayanan("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137),
    _narayanan("3.6B", 30, 3072, 32, 2, 1, 64, 512, 138),
    _narayanan("7.5B", 36, 4096, 32, 4, 1, 128, 512, 142),
    _narayanan("18.4B", 40, 6144, 48, 8, 1, 256, 1024, 135),
    _narayanan("39.1B", 48, 8192, 64, 8, 2, 512, 1536, 138),
    _narayanan("76.1B", 60, 10240, 80, 8, 4, 1024, 1792, 140),
    _narayanan("145.6B", 80, 12288, 96, 8, 8, 1536, 2304, 148),
    _narayanan("310.1B", 96, 16384, 128, 8, 16, 1920, 2160, 155),
    _narayanan("529.6B", 105, 20480, 128, 8, 35, 2520, 2520, 163),
    _narayanan("1008B", 128, 25600, 160, 8, 64, 3072, 3072, 163),
    *_korthikanti("22B", 48, 6144, 64, 1, 8, 4, 4, 1, 1.42, 1.10),
    *_korthikanti("175B", 96, 12288, 96, 8, 64, 64, 1, 3, 18.13, 13.75),
    *_korthikanti("530B", 105, 20480, 128, 35, 280, 280, 1, 3, 49.05, 37.83),
    *_korthikanti("1T", 128, 25600, 160, 64, 512, 512, 1, 1, 94.42, 71.49),
    Published(
        "Dubey et al. 2024 (Llama 3), Table 4: 405B on 8,192 GPUs",
        MODELS["llama3-405b"],
        "H100",
        8192,
        2048,
        {"tp": 8, "pp": 16},
        tflops=430,
    ),
    Published(
        "Dubey et al. 2024 (Llama 3), Table 4: 405B on 16,384 GPUs",
        MODELS["llama3-405b"],
        "H100",
        16384,
        2048,
        {"tp": 8, "pp": 16},
        tflops=400,
    ),
]


def validation() -> list[tuple[Published, float, float]]:
    """(row, published seconds, predicted seconds) for every published row."""
    out = []
    for row in PUBLISHED:
        predicted = plan(
            row.model, GPUS[row.gpu], row.gpus, row.batch, stack=row.stack, **row.fixed
        )
        out.append((row, row.published_s(), predicted.iteration_s))
    return out


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


TARGETS = {"mean_err": 0.05, "max_err": 0.10, "replan_s_16k": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="one timing run instead of five")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    reference = reference_s()
    print(f"reference loop: {reference} s")

    rows = validation()
    errors = []
    print(f"{'published run':62} {'published s':>11} {'predicted s':>11} {'error':>7}")
    for row, published, predicted in rows:
        error = predicted / published - 1
        errors.append(abs(error))
        print(f"{row.source:62} {published:11.2f} {predicted:11.2f} {error:+7.1%}")
    print(f"mean |error| {statistics.mean(errors):.1%}, max {max(errors):.1%}, {len(rows)} runs")

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
        "mean_err": round(statistics.mean(errors), 4),
        "max_err": round(max(errors), 4),
        "replan_s_1k": round(replan_1k, 4),
        "replan_s_16k": round(replan_16k, 4),
        "batch_kept": total == batch,
        "throughput_kept_1000_to_900": round(kept, 4),
        "gpus_kept_1000_to_900": 0.896,
        "reference_s": reference,
    }
    print(json.dumps(figures))
    missed = [k for k, most in TARGETS.items() if figures[k] > most]
    if not figures["batch_kept"]:
        missed.append("batch_kept")
    if kept < 0.88:  # the 90 % of the GPUs asked for, less two points
        missed.append("throughput_kept_1000_to_900")
    if args.check and missed:
        raise SystemExit(f"missed targets: {', '.join(missed)}")


if __name__ == "__main__":
    main()
