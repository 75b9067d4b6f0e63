"""Parallel plans for training a transformer on N GPUs: TP x PP x DP, micro-batches, recompute.

`plans(model, gpu, gpus, batch)` ranks every plan whose memory fits, fastest first; `plan(...)`
is the first. A plan keeps the global batch exactly for any data-parallel size: when the
replicas cannot share the batch evenly, some take one sequence more (the job weighs each
replica's loss by its share, see `examples/train_elastic.py`).

The time of one iteration is built from closed forms, per pipeline stage and micro-batch:

- **compute**: each layer's matrix FLOPs (Narayanan et al., SC'21, §5.1: 24bsh^2 + 4bs^2h per
  forward pass of a GPT layer; here for grouped-query attention and gated FFNs too) at the GPU's
  achievable GEMM rate (the attention core's at a share of it, and half of it with flash
  attention, whose causal kernels skip the masked half), and its element-wise work (layer
  norms, activations, dropout, softmax), which is bound by memory bandwidth: it reads and writes
  the tensors Korthikanti et al. 2022 count as activations (34sbh + 5as^2b bytes per layer,
  Table 2);
- **recompute**: "full" runs each layer's forward again in the backward pass; "selective"
  recomputes only the attention core (Korthikanti §4.2), which flash attention does anyway;
- **tensor parallelism**: two all-reduces (or, with sequence parallelism, two reduce-scatter and
  all-gather pairs of the same volume) of b*s*h values per layer in the forward pass and two in
  the backward (two more when the forward is recomputed), over NVLink, on the critical path,
  or, where the software splits them to run beside the GEMMs that use them
  (`Stack.tp_overlap`), a share of them (`Fit.tp_exposed`);
- **pipeline**: the 1F1B schedule's bubble of (p-1)/v micro-batch times (Narayanan §2.2) and the
  point-to-point sends between stages, per micro-batch and chunk and once per stage to fill and
  drain; the busiest stage sets the pace (layers shared out as evenly as they go, the output
  layer on the last, or, with balanced stages, counted as a layer there);
- **data parallelism**: a ring reduction of the gradients (reduce-scatter plus all-gather of
  the parameters with the distributed optimizer) over the network, or over NVLink inside a node;
  with overlap it hides behind a micro-batch's backward and forward passes, interleaved behind
  the chunk passes that follow each chunk's last backward, and only what is left over counts.
  Across data centers the reduction is hierarchical: inside each, then over the link between
  them, which the whole job shares. Each data-parallel collective waits for the slowest rank:
  compute grows by a share per doubling of the nodes it spans (`Fit.straggler`);
- **optimizer step**: Adam reads and writes its state once, bound by memory bandwidth.

Memory per GPU: parameters, gradients and optimizer state (18 bytes per parameter for mixed
precision Adam, 6 + 12/DP with the distributed optimizer), the activations of the micro-batches
in flight on the first stage, the busiest (Korthikanti Table 2; p of them in 1F1B, (1 + (p-1)/(pv))
times more when interleaved), the fp32 logits when that stage is also the last (PP 1), plus a
fixed reserve for the CUDA context, NCCL buffers and fragmentation.

`docs/parallelism.md` compares the predictions with every published measurement we found with
its configuration; `python -m bench.parallelism` prints that table and the re-planning times.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from functools import lru_cache

from scheduler.words import phrase

GIB = 1024**3


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer; `ffn` is the FFN's inner size, `kv_heads` 0 for one per head."""

    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq: int
    kv_heads: int = 0
    gated: bool = False  # SwiGLU: three FFN matrices instead of two
    tied: bool = True  # the output layer shares the embedding's weights
    dropout: bool = True

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def layer_params(self) -> int:
        h, d = self.hidden, self.hidden // self.heads
        attention = h * (h + 2 * self.kv * d) + h * h
        return attention + (3 if self.gated else 2) * h * self.ffn + 4 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        output = 0 if self.tied else self.embedding_params
        return self.layers * self.layer_params + self.embedding_params + output

    def flops_per_sequence(self) -> float:
        """Forward and backward FLOPs of one sequence, without recompute (the MFU convention)."""
        return 3 * (self.layers * self._layer_flops(1, 1) + self._logit_flops(1, 1))

    def _layer_flops(self, batch: int, tp: int) -> float:
        return self._matrix_flops(batch, tp) + self._attention_flops(batch, tp)

    def _matrix_flops(self, batch: int, tp: int) -> float:
        h, d, tokens = self.hidden, self.hidden // self.heads, batch * self.seq
        attention = h * (h + 2 * self.kv * d) + h * h
        return 2 * tokens * (attention + (3 if self.gated else 2) * h * self.ffn) / tp

    def _attention_flops(self, batch: int, tp: int) -> float:
        return 4 * batch * self.seq**2 * self.hidden / tp

    def _logit_flops(self, batch: int, tp: int) -> float:
        return 2 * batch * self.seq * self.hidden * self.vocab / tp


def gpt(name: str, layers: int, hidden: int, heads: int, seq: int = 2048) -> ModelSpec:
    """A GPT-3 style model as Megatron-LM trains it (FFN 4h, GeLU, vocabulary 51,200)."""
    return ModelSpec(name, layers, hidden, heads, ffn=4 * hidden, vocab=51200, seq=seq)


def llama(name: str, layers: int, hidden: int, heads: int, ffn: int, seq: int = 8192) -> ModelSpec:
    """A Llama 3 style model: grouped-query attention with 8 KV heads, SwiGLU, 128,256 tokens."""
    return ModelSpec(
        name, layers, hidden, heads, ffn, 128256, seq, 8, gated=True, tied=False, dropout=False
    )


MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        gpt("gpt3-1.3b", 24, 2048, 16),
        gpt("gpt3-13b", 40, 5120, 40),
        gpt("gpt3-175b", 96, 12288, 96),
        gpt("megatron-530b", 105, 20480, 128),
        gpt("megatron-1t", 128, 25600, 160),
        llama("llama3-8b", 32, 4096, 32, 14336),
        llama("llama3-70b", 80, 8192, 64, 28672),
        llama("llama3-405b", 126, 16384, 128, 53248),
    )
}


# What is wrong with a model spec, in sentences the portal translates (`scheduler.words`).
UNKNOWN_MODEL = phrase("unknown model {model}; known: {known}")
NAME_OR_SPEC = phrase("a catalogue name or an object with {fields}")
WHOLE_NUMBER = phrase("a positive whole number is required")
AT_MOST = phrase("at most {most}")
DIVIDES_HIDDEN = phrase("must divide the hidden size")
DIVIDES_HEADS = phrase("must divide the attention heads")
TRUE_OR_FALSE = phrase("true or false")


class SpecError(ValueError):
    """A model spec that cannot be used; `field` names what is wrong."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


SPEC_FIELDS = ("layers", "hidden", "heads", "ffn", "vocab", "seq")
# Far beyond any model trained, yet small enough that every figure stays a finite float.
SPEC_LIMITS = {
    "layers": 10_000,
    "hidden": 1_000_000,
    "heads": 100_000,
    "ffn": 10_000_000,
    "vocab": 10_000_000,
    "seq": 10_000_000,
    "kv_heads": 100_000,
}


def model_spec(value: str | dict) -> ModelSpec:
    """A catalogue model by name, or a spec field by field; `SpecError` says what is wrong."""
    if isinstance(value, str):
        if value not in MODELS:
            raise SpecError(
                "model", UNKNOWN_MODEL.format(model=repr(value), known=", ".join(MODELS))
            )
        return MODELS[value]
    if not isinstance(value, dict):
        raise SpecError("model", NAME_OR_SPEC.format(fields=", ".join(SPEC_FIELDS)))
    numbers = {}
    for field in (*SPEC_FIELDS, "kv_heads"):
        number = value.get(field, 0 if field == "kv_heads" else None)
        if type(number) is not int or number < 0 or (number == 0 and field != "kv_heads"):
            raise SpecError(f"model.{field}", WHOLE_NUMBER)
        if number > SPEC_LIMITS[field]:
            raise SpecError(f"model.{field}", AT_MOST.format(most=f"{SPEC_LIMITS[field]:,}"))
        numbers[field] = number
    if numbers["hidden"] % numbers["heads"]:
        raise SpecError("model.heads", DIVIDES_HIDDEN)
    if numbers["kv_heads"] and numbers["heads"] % numbers["kv_heads"]:
        raise SpecError("model.kv_heads", DIVIDES_HEADS)
    flags = {}
    for field, default in (("gated", False), ("tied", True), ("dropout", True)):
        flags[field] = value.get(field, default)
        if type(flags[field]) is not bool:
            raise SpecError(f"model.{field}", TRUE_OR_FALSE)
    return ModelSpec(str(value.get("name") or "custom")[:64], **numbers, **flags)


@dataclass(frozen=True)
class Gpu:
    """A GPU type and its node: peak dense BF16, memory, and bandwidths per GPU in GB/s."""

    name: str
    memory_gib: float
    bf16_tflops: float
    hbm_gbps: float
    nvlink_gbps: float  # one direction
    network_gbps: float  # its NIC, one direction
    gemm_efficiency: float  # achieved share of peak on large BF16 GEMMs
    per_node: int = 8


# Peak dense BF16, memory and bandwidths from the vendors' data sheets; one 200 Gb/s HDR NIC per
# A100 and one 400 Gb/s NDR NIC per Hopper or Blackwell GPU (rail-optimised, as in DGX
# SuperPODs). The GEMM efficiency is the effective share of peak that reproduces the published
# runs in docs/parallelism.md (A100 with 2021-22 kernels, H100 with 2024 ones); the other GPUs
# take their generation's figure.
GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("A100", 80, 312, 2039, 300, 25, 0.70),
        Gpu("H100", 80, 989, 3350, 450, 50, 0.70),
        Gpu("H800", 80, 989, 3350, 200, 50, 0.70),
        Gpu("H20", 96, 148, 4000, 450, 50, 0.70),
        Gpu("H200", 141, 989, 4800, 450, 50, 0.70),
        Gpu("B200", 180, 2250, 8000, 900, 50, 0.70),
    )
}


@dataclass(frozen=True)
class Stack:
    """What the training software does; the defaults are today's Megatron-Core."""

    overlap: bool = True  # gradient reduction and parameter gather overlap compute
    sequence_parallel: bool = True  # activations outside the matrices split over TP too
    flash_attention: bool = True  # attention scores are never written to memory
    fp32_gradients: bool = True  # gradients kept and reduced in fp32 (fp16 in 2021)
    # The first and last pipeline stages count the embedding and the output layer as a layer
    # each and take one layer fewer (Llama 3, Dubey et al. 2024 §3.3.2; BLOOM's
    # `--pp-partition-method 'type:transformer|embedding'`); Megatron-Core's default does not.
    balanced_stages: bool = False
    # The distributed optimizer reduce-scatters the gradients (Megatron-LM); DeepSpeed's
    # pipeline engine all-reduces them whole before its ZeRO-1 step (`_bf16_reduce_grads`).
    reduce_scatter: bool = True
    # Each tensor-parallel rank sends its 1/t of the activations to the next stage, which
    # all-gathers them over NVLink (Narayanan §4.1); DeepSpeed's pipeline engine sends them whole.
    scatter_gather: bool = True
    # Tensor-parallel all-gathers and reduce-scatters run in pieces beside the GEMMs that use
    # them (Megatron-Core's --tp-comm-overlap, Transformer Engine's userbuffers); needs
    # sequence parallelism.
    tp_overlap: bool = False


STACK_2021 = Stack(
    overlap=False, sequence_parallel=False, flash_attention=False, fp32_gradients=False
)
"""Megatron-LM as Narayanan et al. ran it in 2021."""


class Recompute(StrEnum):
    """How much of the forward pass the backward pass runs again."""

    SELECTIVE = "selective"  # the attention core only (Korthikanti et al. §4.2)
    FULL = "full"  # every layer


@dataclass(frozen=True)
class Layout:
    """How a job is split: the knobs a plan chooses."""

    tp: int
    pp: int
    dp: int
    vp: int = 1  # model chunks per stage (interleaved 1F1B when > 1)
    micro_batch: int = 1
    recompute: Recompute = Recompute.SELECTIVE
    distributed_optimizer: bool = True


@dataclass(frozen=True)
class ParallelPlan:
    """A layout for one model, batch and GPU count, with what the model predicts for it."""

    model: str
    gpu: str
    gpus: int
    batch: int
    layout: Layout
    sequences: tuple[int, int]  # per replica: the larger share, then the smaller
    larger_shares: int  # replicas that take the larger share
    iteration_s: float
    tokens_per_s: float
    mfu: float  # model FLOPs (no recompute) per second over peak
    memory_gib: float
    datacenters: int = 1

    @property
    def micro_batches(self) -> tuple[int, int]:
        """Micro-batches per replica for each share; the last may be partly filled."""
        return tuple(-(-n // self.layout.micro_batch) for n in self.sequences)

    @property
    def bubble(self) -> float:
        """The pipeline's idle share of the ideal time: (p - 1) / (v m), Narayanan et al. §2.2."""
        return (self.layout.pp - 1) / (self.layout.vp * self.micro_batches[0])

    @property
    def shape(self) -> str:
        layout = self.layout
        interleave = f" (x{layout.vp} interleaved)" if layout.vp > 1 else ""
        return f"TP{layout.tp} x PP{layout.pp}{interleave} x DP{layout.dp}"

    def as_json(self) -> dict:
        """The plan as the job reads it from WANKA_PARALLEL_PLAN."""
        return {
            **asdict(self.layout),
            "model": self.model,
            "gpu": self.gpu,
            "gpus": self.gpus,
            "global_batch": self.batch,
            "sequences_per_replica": list(self.sequences),
            "replicas_with_more": self.larger_shares,
            "micro_batches_per_replica": list(self.micro_batches),
            "datacenters": self.datacenters,
            # Ranks as Megatron-LM numbers them by default: TP innermost, then DP, then PP.
            "rank_order": "tp-dp-pp",
            "predicted": {
                "iteration_s": round(self.iteration_s, 4),
                "tokens_per_s": round(self.tokens_per_s),
                "mfu": round(self.mfu, 4),
                "memory_gib": round(self.memory_gib, 2),
                "error": PREDICTION_ERROR,
            },
        }


@dataclass(frozen=True)
class Fit:
    """The time model's constants: fitted to the 72 published runs of docs/parallelism.md from
    8 sources (`python -m bench.parallelism` fits them, and scores them on each source left
    out), shared by every GPU type."""

    elementwise_passes: float = 1.35  # element-wise kernels move the stored activations so often
    attention_efficiency: float = 1.0  # the attention core's share of the GEMM rate
    link_efficiency: float = 0.9  # NCCL bus bandwidth over the links' one-direction bandwidth
    # Every rank waits for the slowest at each data-parallel collective: the share of compute
    # lost per doubling of the nodes the reduction spans (stragglers, jitter, congestion).
    straggler: float = 0.023
    # What an iteration costs beyond its micro-batches: the optimizer's kernel launches, the
    # gradient norm's all-reduce, the data loader and logging, once an iteration.
    iteration_overhead_s: float = 0.142
    # The share of the tensor-parallel collectives' time still on the critical path when they
    # overlap the GEMMs (`Stack.tp_overlap`): the first piece of each GEMM waits for its data,
    # and the collectives' kernels take SMs (and memory bandwidth) from the GEMMs beside them.
    tp_exposed: float = 0.67


FIT = Fit()
# How far a prediction may be off: the mean |error| on published runs of sources left out of the
# fit (`bench.parallelism`), said beside every predicted time.
PREDICTION_ERROR = 0.045
RESERVE_GIB = 3.0  # CUDA context, NCCL buffers, allocator fragmentation
DC_LINK_GBPS = 1600.0  # between two data centers of a region, shared by the job, one direction

MICRO_BATCHES = (1, 2, 4, 8)
INTERLEAVE = (1, 2, 3, 4, 5, 6, 7, 8, 12)


class NoPlan(ValueError):
    """No plan fits: the model is too large for this many GPUs of this type."""


def plan(model: ModelSpec, gpu: Gpu, gpus: int, batch: int, **fixed) -> ParallelPlan:
    """The fastest plan that fits; `NoPlan` says why there is none."""
    ranked = plans(model, gpu, gpus, batch, limit=1, **fixed)
    if not ranked:
        raise NoPlan(f"{model.name} does not fit on {gpus} {gpu.name} GPUs with a batch of {batch}")
    return ranked[0]


def plans(
    model: ModelSpec,
    gpu: Gpu,
    gpus: int,
    batch: int,
    *,
    stack: Stack = Stack(),
    datacenters: int = 1,
    limit: int = 10,
    fit: Fit = FIT,
    **fixed,
) -> list[ParallelPlan]:
    """Plans that fit, fastest first; `fixed` pins layout fields (tp=8, pp=4, ...)."""
    if gpus <= 0 or (gpus > gpu.per_node and gpus % gpu.per_node):
        raise ValueError(
            f"{gpus} GPUs is neither part of a node nor whole {gpu.per_node}-GPU nodes"
        )
    if unknown := set(fixed) - set(Layout.__dataclass_fields__):
        raise TypeError(f"not layout fields: {', '.join(sorted(unknown))}")
    found = [
        evaluate(model, gpu, batch, layout, stack=stack, datacenters=datacenters, fit=fit)
        for layout in layouts(model, gpu, gpus, batch, datacenters, stack=stack, **fixed)
    ]
    found = [p for p in found if p.memory_gib <= gpu.memory_gib]
    found.sort(key=lambda p: (p.iteration_s, p.memory_gib))
    return found[:limit]


def layouts(
    model: ModelSpec,
    gpu: Gpu,
    gpus: int,
    batch: int,
    datacenters: int = 1,
    *,
    stack: Stack = Stack(),
    **fixed,
):
    """Every layout worth evaluating, pruned as early as possible.

    TP divides the node, the GPUs and the attention (and KV) heads; PP is at most the layers,
    which it shares out as evenly as it can; every replica gets a sequence, and replicas split
    evenly over the data centers; weights and optimizer state must fit before anything else.
    """
    for tp in _divisors(math.gcd(gpu.per_node, gpus, model.heads, model.kv)):
        for pp in _divisors(gpus // tp):
            dp = gpus // (tp * pp)
            if pp > model.layers or dp > batch or dp % datacenters:
                continue
            if not _allowed(fixed, tp=tp, pp=pp, dp=dp):
                continue
            if _weights_gib(model, tp, pp, dp, True, 2, stack) > gpu.memory_gib:
                continue
            for vp in INTERLEAVE if pp > 1 else (1,):
                # Every model chunk of every stage gets a layer (or, balanced, the embedding or
                # the output layer); the busiest gets as many as the layers allow.
                if pp * vp > _slots(model, pp, stack) or not _allowed(fixed, vp=vp):
                    continue
                yield from _inner(fixed, tp, pp, dp, vp, -(-batch // dp), batch // dp)


def _inner(fixed, tp, pp, dp, vp, most, fewest):
    for micro_batch in MICRO_BATCHES:
        # Interleaved 1F1B wants at least PP micro-batches on every replica.
        if micro_batch > most or (vp > 1 and -(-fewest // micro_batch) < pp):
            continue
        for recompute in Recompute:
            # The distributed optimizer saves memory and traffic: off only when asked.
            distributed = fixed.get("distributed_optimizer", True)
            layout = Layout(tp, pp, dp, vp, micro_batch, recompute, distributed)
            if _allowed(fixed, **asdict(layout)):
                yield layout


def evaluate(
    model: ModelSpec,
    gpu: Gpu,
    batch: int,
    layout: Layout,
    *,
    stack: Stack = Stack(),
    datacenters=1,
    fit: Fit = FIT,
) -> ParallelPlan:
    """The predicted iteration time, throughput and memory of one layout."""
    tp, pp, dp, vp, b = layout.tp, layout.pp, layout.dp, layout.vp, layout.micro_batch
    more, larger_shares = -(-batch // dp), batch % dp or dp
    fewer = batch // dp if batch % dp else more
    micro_s = _stage_micro_batch_s(model, gpu, layout, stack, fit)
    # The nodes a data-parallel collective spans: every one of the job's, none for one replica.
    nodes = max(1, tp * pp * dp // gpu.per_node) if dp > 1 else 1
    compute = micro_s * (more / b + (pp - 1) / vp) * (1 + fit.straggler * math.log2(nodes))
    # A send per micro-batch and model chunk, and one per stage more to fill and drain.
    hops = -(-more // b) * vp + pp - 1
    p2p = _p2p_s(model, gpu, layout, stack, fit) * hops if pp > 1 else 0.0
    reduce = _dp_reduce_s(model, gpu, layout, stack, datacenters, fit)
    hidden = _overlap_window_s(micro_s, pp, vp) if stack.overlap else 0.0
    step = _optimizer_s(model, gpu, layout, stack)
    iteration = compute + p2p + max(0.0, reduce - hidden) + step + fit.iteration_overhead_s
    tokens = batch * model.seq / iteration
    return ParallelPlan(
        model=model.name,
        gpu=gpu.name,
        gpus=tp * pp * dp,
        batch=batch,
        layout=layout,
        sequences=(more, fewer),
        larger_shares=larger_shares,
        iteration_s=iteration,
        tokens_per_s=tokens,
        mfu=tokens
        / model.seq
        * model.flops_per_sequence()
        / (tp * pp * dp * gpu.bf16_tflops * 1e12),
        memory_gib=_memory_gib(model, layout, stack, min(pp, -(-more // b))),
        datacenters=datacenters,
    )


def _stage_micro_batch_s(
    model: ModelSpec, gpu: Gpu, layout: Layout, stack: Stack, fit: Fit = FIT
) -> float:
    """Forward, recompute and backward of one micro-batch through the busiest stage."""
    tp, b = layout.tp, layout.micro_batch
    gemm = gpu.bf16_tflops * 1e12 * gpu.gemm_efficiency
    matrix = model._matrix_flops(b, tp) / gemm
    attention = model._attention_flops(b, tp) / (gemm * fit.attention_efficiency)
    if stack.flash_attention:
        attention /= 2  # its causal kernels skip the masked half (Dao 2023, FlashAttention-2 §3.1)
    moved = fit.elementwise_passes * _activation_bytes(model, b, tp, stack)
    compute = matrix + attention + moved / (gpu.hbm_gbps * 1e9)
    collectives = 2 * _tp_collective_s(model, gpu, layout, fit)  # per pass, forward or backward
    if stack.tp_overlap and stack.sequence_parallel:
        collectives *= fit.tp_exposed
    again = compute + collectives if layout.recompute is Recompute.FULL else attention
    layer = 3 * compute + 2 * collectives + again  # backward computes twice the forward
    logits = 3 * model._logit_flops(b, tp) / gemm  # on the last stage
    layers = _stage_layers(model, layout.pp, layout.vp, stack)
    if _slots(model, layout.pp, stack) > model.layers:  # the output layer takes a layer's place
        return max(layers * layer, (layers - 1) * layer + logits)
    return layers * layer + logits


def _overlap_window_s(micro_s: float, pp: int, vp: int) -> float:
    """The compute that overlapped data-parallel communication can hide behind.

    A chunk's gradients are reduced once its last micro-batch's backward is done, its
    parameters gathered before its first forward (Megatron-Core's overlap_grad_reduce and
    overlap_param_gather). Without interleaving that is one micro-batch's backward and one's
    forward. Interleaved, each stage's v chunks finish one after another: in the cool-down the
    first stage runs p more backward steps of its other chunks after each (Narayanan §2.2's
    schedule), and the warm-up as many forward steps, so (v - 1) p chunk passes hide more.
    """
    return micro_s * (1 + (vp - 1) * pp) / vp


def _tp_collective_s(model: ModelSpec, gpu: Gpu, layout: Layout, fit: Fit) -> float:
    """One all-reduce of a micro-batch's hidden states among the tensor-parallel ranks."""
    tp = layout.tp
    if tp == 1:
        return 0.0
    size = 2 * layout.micro_batch * model.seq * model.hidden
    return 2 * (tp - 1) / tp * size / (gpu.nvlink_gbps * 1e9 * fit.link_efficiency)


def _p2p_s(model: ModelSpec, gpu: Gpu, layout: Layout, stack: Stack, fit: Fit) -> float:
    """Sending one micro-batch's activations forward and its gradients back between stages."""
    size = 2 * layout.micro_batch * model.seq * model.hidden
    if stack.scatter_gather:
        size /= layout.tp
    return 2 * size / (gpu.network_gbps * 1e9 * fit.link_efficiency)


def _dp_reduce_s(
    model: ModelSpec, gpu: Gpu, layout: Layout, stack: Stack, datacenters: int, fit: Fit
) -> float:
    """Reducing the gradients (and gathering the parameters) among the data-parallel replicas."""
    dp = layout.dp
    if dp == 1:
        return 0.0
    params, grad = _stage_params(model, layout.tp, layout.pp, stack), _grad_bytes(stack)
    # A ring all-reduce moves the gradients twice; the distributed optimizer reduce-scatters
    # them once (unless the software all-reduces them all the same) and all-gathers the
    # updated bf16 parameters.
    distributed = layout.distributed_optimizer
    size = params * ((grad if distributed and stack.reduce_scatter else 2 * grad) + 2 * distributed)
    inside = dp // datacenters
    bandwidth = _dp_bandwidth(gpu, layout) * 1e9 * fit.link_efficiency
    ring = (inside - 1) / inside * size / bandwidth
    if datacenters == 1:
        return ring
    # Each DC holds one copy of the whole model's gradients after its own reduce-scatter.
    across = 2 * (datacenters - 1) / datacenters * model.params * grad
    return ring + across / (DC_LINK_GBPS * 1e9 * fit.link_efficiency)


def _dp_bandwidth(gpu: Gpu, layout: Layout) -> float:
    """A replica group's ring bandwidth: NVLink inside a node, else its ranks' NICs there."""
    model_parallel = layout.tp * layout.pp
    if model_parallel * layout.dp <= gpu.per_node:
        return gpu.nvlink_gbps
    ranks_per_node = max(1, gpu.per_node // model_parallel)
    return min(gpu.nvlink_gbps, gpu.network_gbps * ranks_per_node)


def _optimizer_s(model: ModelSpec, gpu: Gpu, layout: Layout, stack: Stack) -> float:
    """Adam reads and writes its fp32 state, the gradients and the bf16 weights once."""
    params = _stage_params(model, layout.tp, layout.pp, stack)
    if layout.distributed_optimizer:
        params /= layout.dp
    return params * 32 / (gpu.hbm_gbps * 1e9)


def _stage_params(model: ModelSpec, tp: int, pp: int, stack: Stack) -> float:
    """Parameters on one GPU of the stage that holds the most: the first, with the embedding
    (balanced, it has a layer fewer, and a middle stage may hold more)."""
    embedding = model.embedding_params * (2 if pp == 1 and not model.tied else 1)
    layers = _stage_layers(model, pp, 1, stack)
    if _slots(model, pp, stack) > model.layers:
        return max(layers * model.layer_params, (layers - 1) * model.layer_params + embedding) / tp
    return (layers * model.layer_params + embedding) / tp


def _grad_bytes(stack: Stack) -> int:
    return 4 if stack.fp32_gradients else 2


def _weights_gib(
    model: ModelSpec, tp: int, pp: int, dp: int, distributed: bool, grad: int, stack: Stack
) -> float:
    """Weights, gradients and Adam's fp32 master weights and moments, with the reserve."""
    per_param = 2 + grad + (12 / dp if distributed else 12)
    return _stage_params(model, tp, pp, stack) * per_param / GIB + RESERVE_GIB


def _activation_bytes(model: ModelSpec, b: int, tp: int, stack: Stack) -> float:
    """Stored activations of one layer and micro-batch on one GPU, in bytes.

    Korthikanti et al. 2022, §4.1 and Table 2 (34sbh + 5as^2b for GPT), term by term so that
    grouped-query attention, gated FFNs and models without dropout count what they store.
    """
    s, h, kv = model.seq * b, model.hidden, model.kv * (model.hidden // model.heads)
    masks = s * h * 2 if model.dropout else 0  # one byte per value, after attention and FFN
    whole = 4 * s * h + 2 * s * h + 2 * s * h + masks  # two norms' inputs, QKV and FC1 inputs
    attention = 2 * s * h + 4 * s * kv + 2 * s * h  # Q, K and V; the output projection's input
    ffn = 2 * s * model.ffn * (3 if model.gated else 2)  # activation input(s), FC2 input
    scores = 0 if stack.flash_attention else 5 * model.heads * model.seq**2 * b
    if stack.sequence_parallel:
        return (whole + attention + ffn + scores) / tp
    return whole + (attention + ffn + scores) / tp


def _memory_gib(model: ModelSpec, layout: Layout, stack: Stack, in_flight: int) -> float:
    """Peak memory of a GPU on the first stage."""
    tp, pp, b = layout.tp, layout.pp, layout.micro_batch
    weights = _weights_gib(
        model, tp, pp, layout.dp, layout.distributed_optimizer, _grad_bytes(stack), stack
    )
    layer = _activation_bytes(model, b, tp, stack)
    stored = (
        layer if layout.recompute is Recompute.SELECTIVE else 2 * model.seq * b * model.hidden / tp
    )
    if layout.recompute is Recompute.SELECTIVE and not stack.flash_attention:
        stored -= 5 * model.heads * model.seq**2 * b / tp  # the scores are recomputed
    stage_layers = _stage_layers(model, pp, layout.vp, stack)
    if _slots(model, pp, stack) > model.layers:
        stage_layers -= 1  # the first stage holds the embedding in a layer's place
    interleave = 1 + (pp - 1) / (pp * layout.vp) if layout.vp > 1 else 1
    activations = stored * stage_layers * in_flight * interleave
    if layout.recompute is Recompute.FULL:
        activations += layer  # the layer being recomputed holds all of its activations
    logits = 4 * b * model.seq * model.vocab / tp if pp == 1 else 0
    return weights + (activations + logits) / GIB


def _slots(model: ModelSpec, pp: int, stack: Stack) -> int:
    """What the stages share out: the layers, and, balanced, the embedding and the output."""
    return model.layers + (2 if stack.balanced_stages and pp > 1 else 0)


def _stage_layers(model: ModelSpec, pp: int, vp: int, stack: Stack) -> int:
    """Layers (or, balanced, their places) of the busiest stage: `vp` chunks of the most a
    chunk gets."""
    return vp * -(-_slots(model, pp, stack) // (pp * vp))


def _allowed(fixed: dict, **values) -> bool:
    return all(fixed.get(k, v) == v for k, v in values.items())


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@lru_cache(maxsize=32_768)
def best_plan(model: ModelSpec, gpu: Gpu, gpus: int, batch: int, **fixed) -> ParallelPlan | None:
    """`plan`, remembered, and None where there is none: what the control plane and the
    simulator ask again and again for the same jobs."""
    try:
        return plan(model, gpu, gpus, batch, **fixed)
    except (NoPlan, ValueError):
        return None


CURVE_POINTS = 9  # sizes planned per elastic job; the engine interpolates between them


def curve(model: ModelSpec, gpu: Gpu, batch: int, fewest: int, most: int) -> tuple:
    """(GPUs, tokens/s) at up to `CURVE_POINTS` sizes from `fewest` to `most` GPUs an elastic
    job may run on (part of a node, or whole nodes), evenly spread and both ends included:
    what the engine weighs its resizes by, and what the simulator runs it at."""
    sizes = [g for g in range(fewest, most + 1) if g <= gpu.per_node or g % gpu.per_node == 0]
    step = max(1, -(-len(sizes) // CURVE_POINTS))
    picked = sorted({*sizes[::step], sizes[-1]}) if sizes else []
    found = ((g, best_plan(model, gpu, g, batch)) for g in picked)
    return tuple((g, p.tokens_per_s) for g, p in found if p is not None)
