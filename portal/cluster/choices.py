from django.db import models
from django.utils.translation import gettext_lazy as _


class Health(models.TextChoices):
    READY = "ready", _("Ready")
    CORDONED = "cordoned", _("Cordoned")
    DRAINING = "draining", _("Draining")
    DOWN = "down", _("Down")
    REPAIRING = "repairing", _("Repairing")


# The node lifecycle: ready -> cordoned -> draining -> down -> repairing -> ready. An operator
# may also return a cordoned or draining node to ready, and a fault may take any node down.
HEALTH_MOVES = {
    Health.READY: {Health.CORDONED, Health.DRAINING, Health.DOWN},
    Health.CORDONED: {Health.READY, Health.DRAINING, Health.DOWN},
    Health.DRAINING: {Health.READY, Health.CORDONED, Health.DOWN},
    Health.DOWN: {Health.REPAIRING},  # back to service only through repair
    Health.REPAIRING: {Health.READY, Health.DOWN},
}


class CommandState(models.TextChoices):
    SENT = "sent", _("Sent")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")


class Severity(models.TextChoices):
    INFO = "info", _("Info")
    WARNING = "warning", _("Warning")
    CRITICAL = "critical", _("Critical")
