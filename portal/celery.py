"""The Celery application. Its tasks are routed by kind of work (settings.CELERY_TASK_ROUTES):
scheduling, recovery, telemetry and what-if runs."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
