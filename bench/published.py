"""Published training runs with their full configuration and what they measured, each with
its source: what `bench.parallelism` holds the planner to (docs/parallelism.md lists them).

A row names its source (a paper's table, a repository's published figures), the model, the
GPUs, the global batch, what the source fixes of the layout (TP, PP, interleaving, micro-batch,
recompute, distributed optimizer) and its software (`Stack`), and one figure: the iteration
time, or the TFLOP/s per GPU (counting recomputed FLOPs where the source does), or the tokens/s
per GPU. The planner picks what a source leaves open.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.parallelism import MODELS, STACK_2021, ModelSpec, Recompute, Stack, gpt

KORTHIKANTI_FULL = STACK_2021
KORTHIKANTI_SELECTIVE = Stack(overlap=False, sequence_parallel=True, flash_attention=False)


@dataclass(frozen=True)
class Published:
    """One published run: its configuration and the figure it reports."""

    source: str  # the publication and its table: runs are left out of a fit by source
    name: str  # the run within it
    model: ModelSpec
    gpu: str
    gpus: int
    batch: int
    fixed: dict = field(default_factory=dict)
    stack: Stack = Stack()
    iteration_s: float | None = None  # reported directly
    tflops: float | None = None  # per GPU, counting recomputed FLOPs when `recomputed`
    recomputed: bool = False
    tokens_per_gpu_s: float | None = None

    def published_s(self) -> float:
        """The reported iteration time, or the one the reported TFLOP/s or tokens/s imply."""
        if self.iteration_s is not None:
            return self.iteration_s
        if self.tokens_per_gpu_s is not None:
            return self.batch * self.model.seq / (self.tokens_per_gpu_s * self.gpus)
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
        "Narayanan et al. SC'21, Table 1",
        name,
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
            "Korthikanti et al. 2022, Table 5",
            f"{name}, {label}",
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
        "Dubey et al. 2024 (Llama 3), Table 4",
        "405B on 8,192 GPUs",
        MODELS["llama3-405b"],
        "H100",
        8192,
        2048,
        {"tp": 8, "pp": 16},
        tflops=430,
    ),
    Published(
        "Dubey et al. 2024 (Llama 3), Table 4",
        "405B on 16,384 GPUs",
        MODELS["llama3-405b"],
        "H100",
        16384,
        2048,
        {"tp": 8, "pp": 16},
        tflops=400,
    ),
]
