"""Estimated starts: the refresh task fills them on pending workloads; the API and the pages
show them to the workload's own tenant only."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from portal.workloads import cycle, eta
from portal.workloads.choices import State
from portal.workloads.models import Workload
from portal.workloads.tasks import refresh_estimates
from tests.builders import api_client, make_workload


@pytest.fixture
def waiting(acme_llm, alice):
    """A 64-GPU job fills the queue's quota for an hour more; a 16-GPU job waits for it."""
    big = make_workload(acme_llm, "big", gpus=64, time_limit_s=7200)
    cycle.scheduling_cycle()
    Workload.objects.filter(pk=big.pk).update(
        state=State.RUNNING, started_at=timezone.now() - timedelta(hours=1)
    )
    job = make_workload(acme_llm, "small", gpus=16, submitted_by=alice)
    cycle.scheduling_cycle()
    return job


def test_the_task_estimates_a_start_when_quota_frees(waiting, clean_redis):
    assert refresh_estimates() >= 1
    waiting.refresh_from_db()
    expected = timezone.now() + timedelta(hours=1)
    assert abs((waiting.estimated_start - expected).total_seconds()) < 60
    assert waiting.estimated_start_p90 >= waiting.estimated_start


def test_a_running_job_is_guessed_from_the_runs_longer_than_it_has_run(waiting, clean_redis):
    """The 64-GPU job's submitter ran three like it: 4 h, then 20 min twice. An hour in, it
    is not one of the 20-minute ones: expected to run 4 h, so the waiting job starts in 3 h
    (from the last two alone it would be expected to run as long again, 1 h more)."""
    big = Workload.objects.get(name="big")
    Workload.objects.filter(pk=big.pk).update(time_limit_s=5 * 3600)
    now = timezone.now()
    for number, minutes in enumerate((240, 20, 20)):
        done = make_workload(big.queue, f"done-{number}", gpus=64, submitted_by=big.submitted_by)
        finished = now - timedelta(days=1, hours=-number)
        Workload.objects.filter(pk=done.pk).update(
            state=State.SUCCEEDED,
            started_at=finished - timedelta(minutes=minutes),
            finished_at=finished,
        )
    eta.refresh(now)
    waiting.refresh_from_db()
    assert abs((waiting.estimated_start - (now + timedelta(hours=3))).total_seconds()) < 60


def test_a_refresh_already_running_keeps_others_out(waiting, clean_redis):
    clean_redis.lock(eta.LOCK, timeout=60).acquire()
    assert refresh_estimates() is None


def test_the_api_shows_and_sorts_by_estimates_to_the_tenant_only(waiting, clean_redis, charlie):
    eta.refresh()
    rows = api_client(waiting.submitted_by).get("/api/v1/workloads/?ordering=estimated_start")
    [row] = [r for r in rows.json()["results"] if r["id"] == waiting.pk]
    assert row["estimated_start"] and row["estimated_start_p90"]
    theirs = api_client(charlie).get("/api/v1/workloads/").json()["results"]
    assert waiting.pk not in [r["id"] for r in theirs]


def test_the_list_and_the_job_page_show_the_estimate(waiting, clean_redis):
    eta.refresh()
    browser = Client()
    browser.force_login(waiting.submitted_by)
    page = browser.get("/workloads/").content.decode()
    assert "Estimated start" in page and "90 %: by" in page
    assert "90 %: by" in browser.get(f"/workloads/{waiting.pk}/").content.decode()


def test_without_an_estimate_the_pages_say_how_far_the_last_one_looked(waiting, clean_redis):
    browser = Client()
    browser.force_login(waiting.submitted_by)
    assert "no estimate yet" in browser.get(f"/workloads/{waiting.pk}/").content.decode()
    Workload.objects.filter(name="big").update(time_limit_s=3 * 86400)
    eta.refresh()
    waiting.refresh_from_db()
    assert waiting.estimated_start is None
    page = browser.get(f"/workloads/{waiting.pk}/").content.decode()
    cap = eta.BOUNDS.per_queue
    # How far ahead, counted from the moment a page is drawn: a day, or 23 hours a moment on.
    told = rf"no estimate: not within (1\sday|23\shours), or behind the first {cap} of its queue"
    assert re.search(told, page), "the page says how far ahead the refresh looked: a day"
    listed = browser.get("/workloads/").content.decode()
    assert re.search(f'data-no-estimate="{told}"', listed)


def test_a_job_submitted_since_the_last_refresh_is_being_estimated(waiting, clean_redis):
    """Not "not within a day" for a job the last refresh never saw: it is being estimated."""
    eta.refresh()
    later = make_workload(waiting.queue, "later", gpus=8)
    browser = Client()
    browser.force_login(waiting.submitted_by)
    assert "Estimating…" in browser.get(f"/workloads/{later.pk}/").content.decode()
    eta.refresh()
    assert "Estimating" not in browser.get(f"/workloads/{later.pk}/").content.decode()
