"""Every task runs on the queue of its kind of work, so that an hour-long what-if, or a tenant's
slow webhook receiver, never holds up a recovery or a scheduling cycle."""

from django.conf import settings

from portal.celery import app

QUEUES = {"scheduling", "recovery", "telemetry", "notifications", "webhooks", "whatif"}


def project_tasks() -> set[str]:
    app.loader.import_default_modules()
    return {name for name in app.tasks if name.startswith("portal.")}


def test_every_task_of_the_project_is_routed_to_a_queue_of_its_kind():
    routes = settings.CELERY_TASK_ROUTES
    assert project_tasks() == set(routes)
    assert {route["queue"] for route in routes.values()} == QUEUES


def test_what_if_runs_alone_use_the_what_if_queue():
    routes = settings.CELERY_TASK_ROUTES
    assert [name for name, r in routes.items() if r["queue"] == "whatif"] == [
        "portal.whatif.tasks.run_whatif"
    ]


def test_every_beat_entry_names_a_task_that_exists():
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert {entry["task"] for entry in schedule.values()} <= project_tasks()


def test_webhook_tries_have_a_queue_of_their_own():
    routes = settings.CELERY_TASK_ROUTES
    assert {name for name, r in routes.items() if r["queue"] == "webhooks"} == {
        "portal.notifications.tasks.deliver",
        "portal.notifications.tasks.resume_deliveries",
    }
