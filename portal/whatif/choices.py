from django.db import models


class RunState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class TraceSource(models.TextChoices):
    PHILLY = "philly", "Microsoft Philly (2017), on its own cluster"
    SYNTHETIC = "synthetic", "Synthetic month: training, fine-tuning and inference"
    CSV = "csv", "Generic trace CSV (uploaded)"


class ClusterSource(models.TextChoices):
    TRACE = "trace", "The trace's own cluster"
    CURRENT = "current", "This cluster, as it is now (nodes, queues, quotas)"
    JSON = "json", "A cluster spec JSON (uploaded)"
