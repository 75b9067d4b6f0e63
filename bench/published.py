"""Published training runs with their full configuration and what they measured, each with
its source: what `bench.parallelism` holds the planner to (docs/parallelism.md lists them).

A row names its source (a paper's table, a repository's published figures), the model, the
GPUs, the global batch, what the source fixes of the layout (TP, PP, interleaving, micro-batch,
recompute, distributed optimizer) and its software (`Stack`), and one figure: the iteration
time, or the TFLOP/s per GPU (counting recomputed FLOPs where the source does), or the tokens/s
per GPU. The planner picks what a source leaves open.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from scheduler.parallelism import MODELS, STACK_2021, ModelSpec, Recompute, Stack, gpt

KORTHIKANTI_FULL = STACK_2021
KORTHIKANTI_SELECTIVE = Stack(overlap=False, sequence_parallel=True, flash_attention=False)
TP_OVERLAP = Stack(tp_overlap=True)
"""Today's Megatron-Core with the tensor-parallel collectives overlapped (--tp-comm-overlap)."""


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
    network_gbps: float | None = None  # a GPU's share of its node's NICs, where not the usual

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


STACK_2022 = Stack(
    overlap=False,
    sequence_parallel=False,
    flash_attention=False,
    balanced_stages=True,
    reduce_scatter=False,
    scatter_gather=False,
)
"""Megatron-DeepSpeed as BLOOM ran it in 2022: fp32 gradients, all-reduced whole, activations
sent whole between stages, and the first and last stages given a layer fewer for the
embedding; nothing else of today's."""
STACK_MT_NLG = replace(STACK_2021, reduce_scatter=False, scatter_gather=False)
"""Megatron-DeepSpeed as MT-NLG ran it in 2021: 2021's Megatron-LM kernels, DeepSpeed's
pipeline engine and its all-reduce of the gradients."""
# DeepSpeed's pipeline engine (MT-NLG, BLOOM) runs plain 1F1B: no interleaved model chunks.
DEEPSPEED_PIPELINE = {"vp": 1}
# Jean Zay, where BLOOM trained: four Omni-Path links per node of 8 A100 (the README), 100 Gb/s
# each (Omni-Path's rate), in GB/s per GPU.
JEAN_ZAY_GBPS = 4 * 100 / 8 / 8

# Nemotron-4 (Parmar et al. 2024, Table 1; Adler et al. 2024): squared-ReLU FFN of 4h, 8 KV
# heads, 256,000 tokens, untied, no dropout, 4,096 tokens a sequence.
NEMOTRON4 = {
    "nemotron4-15b": ModelSpec(
        "nemotron4-15b", 32, 6144, 48, 24576, 256000, 4096, 8, tied=False, dropout=False
    ),
    "nemotron4-340b": ModelSpec(
        "nemotron4-340b", 96, 18432, 96, 73728, 256000, 4096, 8, tied=False, dropout=False
    ),
}
# BLOOM 176B: 70 layers of 14,336 with 112 heads, FFN 4h, 250,880 tokens (padded), 2,048 a sequence.
BLOOM = ModelSpec("bloom-176b", 70, 14336, 112, 4 * 14336, 250880, 2048)


def _megatron_readme(name, layers, hidden, heads, tp, pp, gpus, batch, tflops) -> Published:
    """Megatron-LM's README (weak scaling, Megatron-Core r0.8 on H100): GPT with a vocabulary of
    131,072 and 4,096 tokens a sequence, model TFLOP/s per GPU, overlapped communication, no
    recompute (Megatron-Core's default; flash attention's is the planner's "selective")."""
    return Published(
        "Megatron-LM README, weak-scaling table (Megatron-Core r0.8, H100)",
        name,
        ModelSpec(name, layers, hidden, heads, 4 * hidden, 131072, 4096),
        "H100",
        gpus,
        batch,
        {"tp": tp, "pp": pp, "recompute": Recompute.SELECTIVE},
        TP_OVERLAP,
        tflops=tflops,
    )


def _dgxc(release, model, tp, pp, vp, micro_batch, published) -> Published:
    """NVIDIA's DGX Cloud benchmarking recipes (NeMo), BF16 on H100: the step time of a short
    run. v25.04 prints GPT-3's batch on 512 GPUs as "1204"; its tokens/s say 1,024. NeMo's
    recipes recompute nothing but what flash attention does (the planner's "selective")."""
    gpus, batch, seconds = published
    spec = NEMOTRON4.get(model) or MODELS[model]
    fixed = {"tp": tp, "pp": pp, "micro_batch": micro_batch, "recompute": Recompute.SELECTIVE}
    fixed |= {"vp": vp} if vp else {}
    return Published(
        "NVIDIA DGX Cloud benchmarking recipes (NeMo)",
        f"{release}: {model} on {gpus:,} GPUs",
        spec,
        "H100",
        gpus,
        batch,
        fixed,
        Stack() if (release, model) in DGXC_NO_TP_OVERLAP else TP_OVERLAP,
        iteration_s=seconds,
    )


# The recipes overlap the tensor-parallel collectives (v24.11.1's configurations set
# `ub_tp_comm_overlap: true`, v25.04's scripts configure the userbuffers of NeMo's comm-overlap
# callback) but for v24.11.1's Nemotron-4 340B (`ub_tp_comm_overlap: False`).
DGXC_NO_TP_OVERLAP = {("v24.11.1", "nemotron4-340b")}

# Llama 3 405B (Dubey et al. 2024, §3.3.2): interleaved 1F1B with the first and last stages a
# layer short, so that 126 layers and the embedding and output fill 16 stages of 8 one-layer
# chunks, and 8K-token sequences without activation checkpointing.
LLAMA3_FIXED = {"tp": 8, "pp": 16, "vp": 8, "recompute": Recompute.SELECTIVE}
LLAMA3_STACK = Stack(balanced_stages=True)

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
        LLAMA3_FIXED,
        LLAMA3_STACK,
        tflops=430,
    ),
    Published(
        "Dubey et al. 2024 (Llama 3), Table 4",
        "405B on 16,384 GPUs",
        MODELS["llama3-405b"],
        "H100",
        16384,
        2048,
        LLAMA3_FIXED,
        LLAMA3_STACK,
        tflops=400,
    ),
    *(  # Megatron-Core r0.8 on H100: Megatron-LM's README, weak-scaling table
        _megatron_readme(*row)
        for row in (
            ("1.7B", 24, 2048, 16, 1, 1, 48, 192, 408.8),
            ("7.1B", 30, 4096, 32, 2, 1, 96, 192, 465.9),
            ("16B", 32, 6144, 48, 4, 1, 192, 192, 489.1),
            ("32B", 48, 7168, 56, 8, 1, 384, 192, 459.6),
            ("70B", 84, 8192, 64, 8, 2, 768, 384, 419.7),
            ("119B", 92, 10240, 80, 8, 4, 1536, 768, 420.5),
            ("177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
            ("314B", 96, 16384, 128, 8, 8, 3072, 1536, 474.4),
            ("462B", 112, 18432, 144, 8, 16, 6144, 3072, 459.9),
        )
    ),
    *(  # NVIDIA's DGX Cloud benchmarking recipes, BF16 on H100: step times, v24.11.1 and v25.04
        _dgxc(*row[:-1], point)
        for row in (
            (
                "v24.11.1",
                "gpt3-175b",
                4,
                8,
                12,
                1,
                [
                    (128, 256, 8.91),
                    (256, 512, 8.95),
                    (512, 1024, 9.09),
                    (1024, 2048, 9.01),
                    (2048, 4096, 9.02),
                ],
            ),
            (
                "v24.11.1",
                "nemotron4-15b",
                4,
                1,
                1,
                4,
                [
                    (16, 64, 2.83),
                    (32, 128, 2.86),
                    (64, 256, 2.86),
                    (128, 512, 2.89),
                    (256, 1024, 2.88),
                    (512, 2048, 2.92),
                    (1024, 4096, 2.92),
                    (2048, 8192, 2.96),
                ],
            ),
            (
                "v24.11.1",
                "nemotron4-340b",
                8,
                8,
                12,
                1,
                [
                    (128, 32, 4.61),
                    (256, 64, 4.67),
                    (512, 128, 4.70),
                    (1024, 256, 4.73),
                    (2048, 512, 4.84),
                ],
            ),
            (
                "v25.04",
                "gpt3-175b",
                4,
                8,
                6,
                1,
                [
                    (128, 256, 8.309),
                    (256, 512, 8.408),
                    (512, 1024, 8.42),
                    (1024, 2048, 8.453),
                    (2048, 4096, 8.49),
                ],
            ),
            (
                "v25.04",
                "nemotron4-15b",
                2,
                1,
                1,
                2,
                [
                    (16, 64, 2.66),
                    (32, 128, 2.66),
                    (64, 256, 2.67),
                    (128, 512, 2.67),
                    (256, 1024, 2.68),
                    (512, 2048, 2.71),
                    (1024, 4096, 2.74),
                    (2048, 8192, 2.78),
                ],
            ),
            (
                "v25.04",
                "nemotron4-340b",
                8,
                8,
                None,
                1,
                [(256, 64, 4.36), (512, 128, 4.39), (1024, 256, 4.41), (2048, 512, 4.43)],
            ),
        )
        for point in row[-1]
    ),
    *(  # Nemotron-4 15B's own training (Parmar et al. 2024, Table 2): TP 8, distributed optimizer
        Published(
            "Parmar et al. 2024 (Nemotron-4 15B), Table 2",
            f"stage {stage}: {gpus:,} GPUs",
            NEMOTRON4["nemotron4-15b"],
            "H100",
            gpus,
            batch,
            {"tp": 8, "pp": 1},
            iteration_s=seconds,
        )
        for stage, gpus, batch, seconds in (
            (1, 768, 384, 0.57),
            (2, 1536, 768, 0.58),
            (3, 2304, 1152, 0.64),
        )
    ),
    *(  # BLOOM 176B (BigScience, train/tr11-176B-ml/README.md): Megatron-DeepSpeed, ZeRO-1, A100
        Published(
            "BigScience BLOOM-176B training README",
            name,
            BLOOM,
            "A100",
            384,
            batch,
            {"tp": 4, "pp": 12, "micro_batch": 2, "recompute": Recompute.FULL} | DEEPSPEED_PIPELINE,
            STACK_2022,
            iteration_s=seconds,
            network_gbps=JEAN_ZAY_GBPS,
        )
        for name, batch, seconds in (
            ("global batch 2,048 (iteration 85,376)", 2048, 104.70),
            ("global batch 16 (iteration 3,707)", 16, 15.23),
        )
    ),
    *(  # Megatron-Turing NLG 530B (Smith et al. 2022, section 2.4): TP 8 x PP 35, batch 1,920, A100
        Published(
            "Smith et al. 2022 (MT-NLG 530B), section 2.4",
            f"{nodes} nodes",
            gpt("mt-nlg-530b", 105, 20480, 128),
            "A100",
            nodes * 8,
            1920,
            {"tp": 8, "pp": 35, "recompute": Recompute.FULL} | DEEPSPEED_PIPELINE,
            STACK_MT_NLG,
            iteration_s=seconds,
        )
        for nodes, seconds in ((280, 60.1), (350, 50.2), (420, 44.4))
    ),
]
