"""A job's wall time split into phases, and ETTR over windows."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.ettr import Phase, Span, first_admission, pieces, ratio, split, totals

# Submitted at 0, queued 100 s, starting 20 s, running until a fault at 1,000 s, recovering
# 120 s, running again until it succeeds at 2,000 s.
LIFE = [
    (0, "pending"),
    (100, "admitted"),
    (110, "starting"),
    (120, "running"),
    (1000, "recovering"),
    (1120, "running"),
    (2000, "succeeded"),
]


def seconds(spans, **window):
    return {phase: value for phase, value in totals(spans, **window).items() if value}


def test_states_become_phases_and_the_end_state_closes_the_timeline():
    spans = split(LIFE, until=5000)
    assert spans[0] == Span(Phase.QUEUED, 0, 100)
    assert seconds(spans) == {
        Phase.STARTING: 20,
        Phase.PRODUCTIVE: 880 + 880,
        Phase.RECOVERING: 120,
    }


def test_stalls_and_lost_work_are_cut_out_of_productive_time():
    spans = split(LIFE, until=5000, stalls=[(500, 30), (1500, 30)], losses=[(1000, 200)])
    assert seconds(spans) == {
        Phase.STARTING: 20,
        Phase.PRODUCTIVE: 1760 - 60 - 200,
        Phase.CHECKPOINT_STALL: 60,
        Phase.LOST: 200,
        Phase.RECOVERING: 120,
    }
    assert ratio(totals(spans)) == pytest.approx(1500 / 1900)


def test_queueing_before_the_first_admission_is_not_the_jobs_but_a_requeue_is():
    life = [
        (0, "pending"),
        (1000, "admitted"),
        (1000, "running"),
        (2000, "recovering"),
        (2100, "pending"),
        (2500, "admitted"),
        (2500, "running"),
    ]
    spans = split(life, until=3000)
    assert first_admission(spans) == 1000
    assert seconds(spans) == {Phase.PRODUCTIVE: 1500, Phase.RECOVERING: 100, Phase.QUEUED: 400}
    assert ratio(totals(spans)) == pytest.approx(1500 / 2000)


def test_a_window_counts_only_what_falls_inside_it():
    spans = split(LIFE, until=5000)
    assert seconds(spans, since=900, until=1200) == {Phase.PRODUCTIVE: 180, Phase.RECOVERING: 120}
    assert seconds(spans, since=3000, until=4000) == {}
    assert ratio(totals(spans, since=3000, until=4000)) is None


def test_a_job_never_admitted_has_no_ettr():
    spans = split([(0, "pending"), (50, "cancelled")], until=100)
    assert first_admission(spans) is None and ratio(totals(spans)) is None


@given(
    st.lists(st.tuples(st.floats(0, 10_000), st.floats(0, 500)), max_size=5),
    st.lists(st.tuples(st.floats(0, 10_000), st.floats(0, 2_000)), max_size=5),
)
def test_carving_never_changes_the_wall_time(stalls, losses):
    plain, carved = split(LIFE, 5000), split(LIFE, 5000, stalls, losses)
    assert sum(s.seconds for s in carved) == pytest.approx(sum(s.seconds for s in plain))
    assert all(s.end > s.start for s in carved)
    assert all(a.end == pytest.approx(b.start) for a, b in zip(carved, carved[1:], strict=False))


@given(
    st.lists(st.tuples(st.floats(0, 10_000), st.floats(0, 500)), max_size=5),
    st.floats(-2_000, 3_000),
    st.floats(1, 1_000),
    st.integers(1, 30),
)
def test_pieces_add_up_to_the_totals_of_each_slice(stalls, since, width, buckets):
    spans = split([*LIFE[:-1], (2400, "pending"), (2600, "admitted")], 9000, stalls)
    found = [dict.fromkeys(Phase, 0.0) for _ in range(buckets)]
    for i, phase, seconds in pieces(spans, since, width, buckets):
        found[i][phase] += seconds
    for i, bucket in enumerate(found):
        expected = totals(spans, since + i * width, since + (i + 1) * width)
        assert bucket == pytest.approx(expected, abs=1e-6)
