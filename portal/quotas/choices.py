from django.db import models
from django.utils.translation import gettext_lazy as _


class RequestStatus(models.TextChoices):
    PENDING = "pending", _("Pending")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")


class Strategy(models.TextChoices):
    """How a queue treats a head that cannot start yet."""

    BEST_EFFORT_FIFO = "best_effort_fifo", _("Best-effort FIFO (later jobs may start meanwhile)")
    STRICT_FIFO = "strict_fifo", _("Strict FIFO (nothing overtakes the head)")


class StragglerPolicy(models.TextChoices):
    ALERT = "alert", _("Only alert")
    REPLACE = "replace", _("Replace the node with a spare")


# A queue's preemption policy in Kueue's names, labels and values alike (scheduler.engine's enums
# of the same names); the fields' help_text says what each does, `Queue.preemption_in_words`
# puts them to tenants.


class ReclaimWithinCohort(models.TextChoices):
    """Kueue's reclaimWithinCohort: what a queue under its nominal quota takes back of the quota
    other queues of its cohort borrowed."""

    NEVER = "Never", "Never"
    LOWER_PRIORITY = "LowerPriority", "LowerPriority"
    ANY = "Any", "Any"


class WithinClusterQueue(models.TextChoices):
    """Kueue's withinClusterQueue: what a job may evict of its own queue's work."""

    NEVER = "Never", "Never"
    LOWER_PRIORITY = "LowerPriority", "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority", "LowerOrNewerEqualPriority"


class FairSharing(models.TextChoices):
    """Kueue's fair-sharing preemption strategies: whether a borrowing job may evict another
    queue's borrowed work, judged by the two queues' weighted shares."""

    OFF = "Off", "Off"
    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = (
        "LessThanOrEqualToFinalShare",
        "LessThanOrEqualToFinalShare",
    )
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare", "LessThanInitialShare"
    # the first, and where it finds no room, the second (Kueue's default list)
    BOTH = (
        "LessThanOrEqualToFinalShare,LessThanInitialShare",
        "LessThanOrEqualToFinalShare,LessThanInitialShare",
    )


class BudgetWindow(models.TextChoices):
    """The stretch of time a budget's GPU-hours cover."""

    MONTH = "month", _("Calendar month (UTC)")
    ROLLING = "rolling", _("Rolling days")
