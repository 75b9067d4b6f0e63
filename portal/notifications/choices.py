from django.db import models
from django.utils.translation import gettext_lazy as _


class Topic(models.TextChoices):
    """What a webhook or a member may be told of."""

    JOB_FINISHED = "job.finished", _("Jobs that end (succeeded, failed, cancelled)")
    JOB_STATE = "job.state", _("Every change of a job's state")
    FAULT = "fault", _("Faults that hit the tenant's jobs")
    QUOTA = "quota", _("Decisions on quota and budget requests")
    BUDGET = "budget", _("Budgets crossing a warning threshold, with when they run out")


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    DELIVERED = "delivered", _("Delivered")
    FAILED = "failed", _("Failed")
