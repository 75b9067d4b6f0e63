from django.db import models


class RequestStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"


class Strategy(models.TextChoices):
    """How a queue treats a head that cannot start yet."""

    BEST_EFFORT_FIFO = "best_effort_fifo", "Best-effort FIFO (later jobs may start meanwhile)"
    STRICT_FIFO = "strict_fifo", "Strict FIFO (nothing overtakes the head)"


class StragglerPolicy(models.TextChoices):
    ALERT = "alert", "Only alert"
    REPLACE = "replace", "Replace the node with a spare"
