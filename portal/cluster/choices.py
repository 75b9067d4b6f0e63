from django.db import models


class Health(models.TextChoices):
    READY = "ready", "Ready"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"
    DOWN = "down", "Down"
    REPAIRING = "repairing", "Repairing"


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
    SENT = "sent", "Sent"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class Severity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"
