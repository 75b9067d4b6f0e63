from django.db import models
from django.utils.translation import gettext_lazy as _


class RunState(models.TextChoices):
    PENDING = "pending", _("Pending")
    RUNNING = "running", _("Running")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")


class TraceSource(models.TextChoices):
    PHILLY = "philly", _("Microsoft Philly (2017), on its own cluster")
    SYNTHETIC = "synthetic", _("Synthetic month: training, fine-tuning and inference")
    CSV = "csv", _("Generic trace CSV (uploaded)")
    HISTORY = "history", _("This cluster's last days: its own jobs, replayed on it")


class ClusterSource(models.TextChoices):
    TRACE = "trace", _("The trace's own cluster")
    CURRENT = "current", _("This cluster, as it is now (nodes, queues, quotas)")
    JSON = "json", _("A cluster spec JSON (uploaded)")
