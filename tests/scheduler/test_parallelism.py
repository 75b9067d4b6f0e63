"""The parallelism planner: FLOPs, parameters, memory and the bubble by hand, the published runs,
and properties every plan keeps (the global batch exactly, memory within the GPU)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.parallelism import PUBLISHED, validation
from scheduler.parallelism import (
    FIT,
    GIB,
    GPUS,
    MODELS,
    RESERVE_GIB,
    Layout,
    NoPlan,
    Recompute,
    SpecError,
    Stack,
    _activation_bytes,
    evaluate,
    gpt,
    layouts,
    model_spec,
    plan,
    plans,
)

A100, H800 = GPUS["A100"], GPUS["H800"]


def test_flops_are_narayanans_closed_form() -> None:
    """A GPT sequence forward and back: 72slh^2 (1 + s/6h + V/12lh), SC'21 eq. 3 less recompute."""
    m = gpt("1.7B", 24, 2304, 24)
    s, n, h, v = m.seq, m.layers, m.hidden, m.vocab
    assert m.flops_per_sequence() == pytest.approx(
        72 * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))
    )


def test_gpt3_has_175_billion_parameters() -> None:
    assert MODELS["gpt3-175b"].params == pytest.approx(175e9, rel=0.005)
    assert MODELS["llama3-405b"].params == pytest.approx(405e9, rel=0.01)
    assert MODELS["llama3-8b"].params == pytest.approx(8.03e9, rel=0.01)


def test_memory_is_korthikantis_activations_and_mixed_precision_adam() -> None:
    """1.3B on one GPU, no sequence parallelism, no flash attention, selective recompute:
    18 bytes per parameter, and per layer 34sbh bytes (the 5as^2b of the scores recomputed),
    plus the fp32 logits of one micro-batch."""
    m = MODELS["gpt3-1.3b"]
    layout = Layout(tp=1, pp=1, dp=1, micro_batch=2, distributed_optimizer=False)
    stack = Stack(overlap=False, sequence_parallel=False, flash_attention=False)
    p = evaluate(m, A100, 2, layout, stack=stack)
    s, b, h = m.seq, 2, m.hidden
    expected = m.params * 18 + m.layers * 34 * s * b * h + 4 * b * s * m.vocab
    assert p.memory_gib == pytest.approx(expected / GIB + RESERVE_GIB, rel=1e-9)


def test_tensor_parallelism_splits_what_sequence_parallelism_lets_it() -> None:
    """Korthikanti Table 2: sbh(10 + 24/t + 5as/ht), and sbh(34/t + 5as/ht) with sequence
    parallelism."""
    m, t = gpt("x", 1, 4096, 32), 8
    s, h, a = m.seq, m.hidden, m.heads
    for sp, per_sbh in (
        (False, 10 + 24 / t + 5 * a * s / (h * t)),
        (True, 34 / t + 5 * a * s / (h * t)),
    ):
        stack = Stack(sequence_parallel=sp, flash_attention=False)
        assert _activation_bytes(m, 1, t, stack) == pytest.approx(per_sbh * s * h)


def test_the_bubble_is_p_minus_1_over_v_m() -> None:
    """PP 8 with 64 micro-batches: 7/64 idle; interleaved 4 ways: 7/256."""
    m = MODELS["gpt3-175b"]
    plain = evaluate(m, A100, 64, Layout(tp=8, pp=8, dp=1))
    interleaved = evaluate(m, A100, 64, Layout(tp=8, pp=8, dp=1, vp=4))
    assert plain.bubble == pytest.approx(7 / 64)
    assert interleaved.bubble == pytest.approx(7 / 256)
    assert interleaved.iteration_s < plain.iteration_s


def test_balanced_stages_give_the_embedding_and_the_output_a_layers_place() -> None:
    """Llama 3 405B on 16 stages (Dubey et al. §3.3.2): 126 layers and the two ends fill 8
    one-layer chunks a stage, which unbalanced stages cannot, and the last stage's output layer
    no longer comes on top of a full stage."""
    m, h100, balanced = MODELS["llama3-405b"], GPUS["H100"], Stack(balanced_stages=True)
    pinned = {"tp": 8, "pp": 16, "vp": 8}
    assert not list(layouts(m, h100, 8192, 2048, **pinned))
    assert list(layouts(m, h100, 8192, 2048, stack=balanced, **pinned))
    layout = Layout(tp=8, pp=16, dp=64)
    plain = evaluate(m, h100, 2048, layout)
    assert evaluate(m, h100, 2048, layout, stack=balanced).iteration_s < plain.iteration_s


def test_deepspeeds_pipeline_engine_moves_more_than_megatrons() -> None:
    """Whole activations from every tensor-parallel rank and gradients all-reduced whole: the
    same layout takes longer (Megatron-DeepSpeed, as BLOOM and MT-NLG ran it)."""
    m, layout = MODELS["gpt3-175b"], Layout(tp=4, pp=12, dp=8, micro_batch=2)
    megatron = Stack(overlap=False)
    deepspeed = replace(megatron, reduce_scatter=False, scatter_gather=False)
    assert (
        evaluate(m, A100, 16, layout, stack=deepspeed).iteration_s
        > evaluate(m, A100, 16, layout, stack=megatron).iteration_s
    )


def test_overlapped_tensor_parallel_collectives_leave_their_exposed_share() -> None:
    """With --tp-comm-overlap the collectives count `Fit.tp_exposed` of their time: none hidden
    at that share, all at zero; without sequence parallelism nothing overlaps."""
    m, layout = MODELS["gpt3-175b"], Layout(tp=8, pp=1, dp=1, micro_batch=1)
    apart, overlapped = Stack(), Stack(tp_overlap=True)

    def time(stack: Stack, exposed: float) -> float:
        fit = replace(FIT, tp_exposed=exposed)
        return evaluate(m, H800, 1, layout, stack=stack, fit=fit).iteration_s

    assert time(overlapped, 1.0) == time(apart, 0.0)
    assert time(apart, 0.0) > time(overlapped, FIT.tp_exposed) > time(overlapped, 0.0)
    no_sp = replace(apart, sequence_parallel=False)
    assert time(replace(no_sp, tp_overlap=True), 0.0) == time(no_sp, 0.0)


def test_interleaving_hides_more_of_the_data_parallel_reduction() -> None:
    """Each chunk's gradients reduce after its own last backward and its parameters gather
    before its first forward, so interleaved chunks hide more of the reduction."""
    m, hidden = MODELS["gpt3-175b"], []
    for vp in (1, 4):
        layout = Layout(tp=8, pp=8, dp=16, vp=vp)
        apart = evaluate(m, H800, 1024, layout, stack=Stack(overlap=False)).iteration_s
        hidden.append(apart - evaluate(m, H800, 1024, layout).iteration_s)
    assert hidden[1] > hidden[0] > 0


def test_stragglers_cost_a_data_parallel_job_but_not_a_single_replica() -> None:
    """Charged per doubling of the nodes a data-parallel collective spans: none with one
    replica, however many nodes its pipeline spans."""
    m = MODELS["gpt3-175b"]
    one = evaluate(m, A100, 64, Layout(tp=8, pp=8, dp=1))
    fit = replace(FIT, straggler=0.0)
    assert one.iteration_s == evaluate(m, A100, 64, Layout(tp=8, pp=8, dp=1), fit=fit).iteration_s
    two = Layout(tp=8, pp=8, dp=2)
    assert evaluate(m, A100, 64, two).iteration_s > evaluate(m, A100, 64, two, fit=fit).iteration_s


def test_the_published_runs_it_is_fitted_to_within_seven_percent_on_average() -> None:
    """In-sample (bench.parallelism scores it on sources left out): at least 60 runs from 8
    sources, within 7 % on average, none off by more than a third."""
    errors = [abs(predicted / published - 1) for _, published, predicted in validation()]
    assert len(errors) == len(PUBLISHED) >= 60
    assert len({row.source for row in PUBLISHED}) >= 8
    assert max(errors) <= 0.33
    assert sum(errors) / len(errors) <= 0.07


def test_more_gpus_never_make_a_big_job_slower_per_iteration() -> None:
    m = MODELS["gpt3-175b"]
    times = [plan(m, H800, n, 1536).iteration_s for n in (512, 1024, 2048)]
    assert times[0] > times[1] > times[2]


def test_a_model_too_large_has_no_plan_and_says_so() -> None:
    with pytest.raises(NoPlan, match="megatron-1t does not fit on 8 H800"):
        plan(MODELS["megatron-1t"], H800, 8, 64)


def test_gpu_counts_are_part_of_a_node_or_whole_nodes_and_fixed_fields_are_layout_fields() -> None:
    with pytest.raises(ValueError, match="whole 8-GPU nodes"):
        plans(MODELS["gpt3-13b"], H800, 900, 512)
    assert plan(MODELS["gpt3-1.3b"], H800, 3, 12).layout.dp == 3
    with pytest.raises(TypeError, match="tensor"):
        plans(MODELS["gpt3-13b"], H800, 64, 512, tensor=4)


def test_pinned_fields_are_kept() -> None:
    p = plan(MODELS["gpt3-13b"], H800, 64, 512, tp=4, recompute=Recompute.FULL)
    assert (p.layout.tp, p.layout.recompute) == (4, Recompute.FULL)


def test_spanning_two_data_centers_costs_the_link() -> None:
    """The same layout across two data centers pays for the gradients over the shared link."""
    m, layout = MODELS["gpt3-175b"], Layout(tp=8, pp=8, dp=16)
    one = evaluate(m, H800, 1536, layout)
    two = evaluate(m, H800, 1536, layout, datacenters=2)
    assert two.iteration_s > one.iteration_s
    assert two.tokens_per_s / one.tokens_per_s > 0.9  # big batches hide most of it


@pytest.mark.parametrize(
    "value, field",
    [
        ("gpt-9", "model"),
        (
            {"layers": 2, "hidden": 64, "heads": 3, "ffn": 256, "vocab": 100, "seq": 16},
            "model.heads",
        ),
        ({"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 100}, "model.seq"),
        (
            {"layers": -1, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 100, "seq": 8},
            "model.layers",
        ),
        ({"layers": 2, "hidden": 64, "heads": 4, "ffn": 1.5, "vocab": 100, "seq": 8}, "model.ffn"),
        (
            {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 3, "ffn": 8, "vocab": 9, "seq": 8},
            "model.kv_heads",
        ),
        (["gpt3-13b"], "model"),
        (
            {"layers": 2, "hidden": 10**160, "heads": 4, "ffn": 8, "vocab": 9, "seq": 8},
            "model.hidden",
        ),
        (
            {
                "layers": 2,
                "hidden": 64,
                "heads": 4,
                "ffn": 8,
                "vocab": 9,
                "seq": 8,
                "gated": "false",
            },
            "model.gated",
        ),
    ],
)
def test_a_bad_spec_names_its_field(value, field) -> None:
    with pytest.raises(SpecError) as error:
        model_spec(value)
    assert error.value.field == field


def test_a_spec_by_fields_or_by_name() -> None:
    spec = model_spec(
        {
            "name": "mine",
            "layers": 4,
            "hidden": 256,
            "heads": 4,
            "ffn": 1024,
            "vocab": 1000,
            "seq": 128,
        }
    )
    assert (spec.name, spec.kv, spec.gated) == ("mine", 4, False)
    assert model_spec("llama3-70b") is MODELS["llama3-70b"]


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 256),
    batch=st.integers(1, 4096),
    name=st.sampled_from(["gpt3-1.3b", "gpt3-13b", "llama3-8b", "llama3-70b"]),
)
def test_every_plan_keeps_the_batch_exactly_and_fits(nodes, batch, name) -> None:
    """For any GPU count: shares sum to the global batch, micro-batches hold them, memory fits."""
    for p in plans(MODELS[name], H800, nodes * 8, batch, limit=5):
        more, fewer = p.sequences
        dp = p.layout.dp
        assert more * p.larger_shares + fewer * (dp - p.larger_shares) == batch
        assert more - fewer in (0, 1) and fewer >= 1
        shares = zip(p.micro_batches, p.sequences, strict=True)
        assert all(mb * p.layout.micro_batch >= n for mb, n in shares)
        assert p.layout.tp * p.layout.pp * dp == nodes * 8 == p.gpus
        assert p.memory_gib <= H800.memory_gib
        assert 0 < p.mfu < 1 and math.isfinite(p.iteration_s)
        assert p.layout.pp * p.layout.vp <= MODELS[name].layers  # no empty model chunk
        if p.layout.vp > 1:  # interleaving wants PP micro-batches on every replica
            assert min(p.micro_batches) >= p.layout.pp
