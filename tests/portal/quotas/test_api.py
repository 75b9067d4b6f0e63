"""A queue's preemption policy in Kueue's names: operators set it in the console, tenants read
it in the API and on the quota page, and the engine gets exactly what was set."""

from itertools import product

import pytest
from rest_framework.exceptions import ValidationError

from portal.core.api import exception_handler
from portal.quotas import choices
from portal.quotas import engine as quota_engine
from portal.quotas.api.serializers import QueueSerializer
from portal.quotas.models import Queue
from scheduler import engine
from tests.builders import api_client

POLICY = {
    "reclaim_within_cohort": "LowerPriority",
    "borrow_within_cohort": True,
    "max_priority_threshold": 3,
    "fair_sharing": "LessThanInitialShare",
    "preempt_by_fair_share": True,
}
# What the engine must be handed for POLICY (within_cluster_queue left at its default).
ENGINE_POLICY = engine.PreemptionPolicy(
    reclaim_within_cohort=engine.ReclaimWithinCohort.LOWER_PRIORITY,
    within_cluster_queue=engine.WithinClusterQueue.LOWER_PRIORITY,
    borrow_within_cohort=True,
    max_priority_threshold=3,
    fair_sharing=engine.FairSharing.LESS_THAN_INITIAL_SHARE,
    preempt_by_fair_share=True,
)


def _engine_policy(queue) -> engine.PreemptionPolicy:
    (snapshot_queue,) = (q for q in quota_engine.queues() if q.id == queue.pk)
    return snapshot_queue.preemption


def _console_change(client, queue, **policy):
    """The operator console's change form for `queue`, posted with `policy` changed."""
    form = {
        "tenant": queue.tenant_id,
        "name": queue.name,
        "region": queue.region_id,
        "cohort": "",
        "priority": queue.priority,
        "weight": queue.weight,
        "strategy": queue.strategy,
        "preemption_grace_s": queue.preemption_grace_s,
        "straggler_policy": queue.straggler_policy,
        "reclaim_within_cohort": queue.reclaim_within_cohort,
        "within_cluster_queue": queue.within_cluster_queue,
        "fair_sharing": queue.fair_sharing,
        "quotas-TOTAL_FORMS": 0,
        "quotas-INITIAL_FORMS": 0,
        "quotas-MIN_NUM_FORMS": 0,
        "quotas-MAX_NUM_FORMS": 1000,
        "family_quotas-TOTAL_FORMS": 0,
        "family_quotas-INITIAL_FORMS": 0,
    }
    for field, value in policy.items():
        if value is True:
            form[field] = "on"
        elif value is not False:
            form[field] = value
    return client.post(f"/admin/quotas/queue/{queue.pk}/change/", form)


@pytest.mark.parametrize(
    ("portal_choices", "engine_enum"),
    [
        (choices.ReclaimWithinCohort, engine.ReclaimWithinCohort),
        (choices.WithinClusterQueue, engine.WithinClusterQueue),
        (choices.FairSharing, engine.FairSharing),
    ],
    ids=["reclaimWithinCohort", "withinClusterQueue", "fair sharing"],
)
def test_the_portals_choices_are_the_engines_values(portal_choices, engine_enum):
    assert sorted(portal_choices.values) == sorted(member.value for member in engine_enum)


def test_a_new_queue_has_the_engines_default_policy_and_tenants_read_it(acme_llm, bob):
    (queue,) = api_client(bob).get("/api/v1/queues/").json()["results"]
    assert {name: queue[name] for name in [*POLICY, "within_cluster_queue"]} == {
        "reclaim_within_cohort": "Any",
        "within_cluster_queue": "LowerPriority",
        "borrow_within_cohort": False,
        "max_priority_threshold": None,
        "fair_sharing": "LessThanOrEqualToFinalShare",
        "preempt_by_fair_share": False,
    }
    assert _engine_policy(acme_llm) == engine.PreemptionPolicy()


def test_an_operator_sets_the_policy_and_the_engine_gets_exactly_that(
    acme_llm, bob, operator, client
):
    client.force_login(operator)
    form = client.get(f"/admin/quotas/queue/{acme_llm.pk}/change/").content.decode()
    assert "Preemption (Kueue&#x27;s names)" in form
    assert _console_change(client, acme_llm, **POLICY).status_code == 302
    listed = client.get("/admin/quotas/queue/", {"reclaim_within_cohort": "LowerPriority"})
    assert listed.context["cl"].result_count == 1
    assert _engine_policy(acme_llm) == ENGINE_POLICY
    (queue,) = api_client(bob).get("/api/v1/queues/").json()["results"]
    assert {name: queue[name] for name in POLICY} == POLICY


def test_the_api_serializer_writes_the_policy_the_engine_gets(acme_llm):
    serializer = QueueSerializer(acme_llm, data=POLICY, partial=True)
    assert serializer.is_valid(), serializer.errors
    serializer.save()
    assert _engine_policy(acme_llm) == ENGINE_POLICY


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (
            {"reclaim_within_cohort": "Sometimes"},
            "reclaim_within_cohort",
            '"Sometimes" is not a valid choice.',
        ),
        (
            {"within_cluster_queue": "Sometimes"},
            "within_cluster_queue",
            '"Sometimes" is not a valid choice.',
        ),
        ({"fair_sharing": "Sometimes"}, "fair_sharing", '"Sometimes" is not a valid choice.'),
        (
            {"max_priority_threshold": 3},
            "max_priority_threshold",
            "A maximum priority threshold applies only when borrow_within_cohort is set.",
        ),
    ],
    ids=[
        "reclaim sometimes",
        "preempt in the queue sometimes",
        "share sometimes",
        "a priority threshold without borrowing",
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(
    acme_llm, operator, client, change, field, reason
):
    serializer = QueueSerializer(acme_llm, data=change, partial=True)
    with pytest.raises(ValidationError) as refused:
        serializer.is_valid(raise_exception=True)
    assert exception_handler(refused.value, {}).data == {
        "errors": [{"field": field, "reason": reason}]
    }
    client.force_login(operator)
    page = _console_change(client, acme_llm, **change)
    assert page.status_code == 200  # the form again, with the error
    assert field in page.context["adminform"].form.errors
    assert _engine_policy(acme_llm) == engine.PreemptionPolicy()


def test_the_quota_page_puts_the_policy_in_words(acme_llm, bob, client):
    acme_llm.borrow_within_cohort = True
    acme_llm.max_priority_threshold = 100
    acme_llm.within_cluster_queue = choices.WithinClusterQueue.NEVER
    acme_llm.save()
    client.force_login(bob)
    page = client.get("/quota/").content.decode()
    assert "Takes back lent quota: from any borrower" in page
    assert "Preempts in this queue: nothing" in page
    assert (
        "Preempts while borrowing: other queues&#x27; lower-priority jobs on borrowed quota "
        "(of priority 100 at most), if this queue&#x27;s share stays no larger than theirs "
        "afterwards" in page
    )


def test_every_setting_has_words_for_tenants():
    for reclaim, within, fair in product(
        choices.ReclaimWithinCohort, choices.WithinClusterQueue, choices.FairSharing
    ):
        queue = Queue(
            reclaim_within_cohort=reclaim,
            within_cluster_queue=within,
            borrow_within_cohort=True,
            fair_sharing=fair,
        )
        assert len(queue.preemption_in_words()) == 3
