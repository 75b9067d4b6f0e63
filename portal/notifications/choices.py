from django.db import models


class Topic(models.TextChoices):
    """What a webhook or a member may be told of."""

    JOB_FINISHED = "job.finished", "Jobs that end (succeeded, failed, cancelled)"
    JOB_STATE = "job.state", "Every change of a job's state"
    FAULT = "fault", "Faults that hit the tenant's jobs"
    QUOTA = "quota", "Decisions on quota requests"
    BUDGET = "budget", "Budgets crossing a warning threshold, with when they run out"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"
