import secrets

from django.db import models

from portal.cluster.choices import Health, Severity
from portal.tenancy.models import hash_token


class GpuModel(models.Model):
    """A kind of GPU the cluster offers, such as H800 or H20."""

    name = models.CharField(max_length=32, unique=True)
    memory_gb = models.PositiveIntegerField()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Region(models.Model):
    """A geographic region; quotas are requested per region."""

    name = models.CharField(max_length=64, unique=True)

    def __str__(self):
        return self.name


class DataCenter(models.Model):
    """A data center in a region; gang jobs stay inside one unless they allow otherwise."""

    region = models.ForeignKey(Region, on_delete=models.PROTECT, related_name="datacenters")
    name = models.CharField(max_length=64, unique=True)

    def __str__(self):
        return self.name


class Pod(models.Model):
    """A spine group inside a data center."""

    datacenter = models.ForeignKey(DataCenter, on_delete=models.PROTECT, related_name="pods")
    name = models.CharField(max_length=64)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["datacenter", "name"], name="%(app_label)s_%(class)s_unique_name"
            )
        ]

    def __str__(self):
        return f"{self.datacenter}/{self.name}"


class Leaf(models.Model):
    """A leaf (top-of-rack) switch: the tightest network domain above a node."""

    pod = models.ForeignKey(Pod, on_delete=models.PROTECT, related_name="leaves")
    name = models.CharField(max_length=64)

    class Meta:
        verbose_name_plural = "leaves"
        constraints = [
            models.UniqueConstraint(
                fields=["pod", "name"], name="%(app_label)s_%(class)s_unique_name"
            )
        ]

    def __str__(self):
        return f"{self.pod}/{self.name}"


class Node(models.Model):
    """A GPU server (one NVLink island of GPUs) with one node agent."""

    name = models.CharField(max_length=64, unique=True)
    leaf = models.ForeignKey(Leaf, on_delete=models.PROTECT, related_name="nodes")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="nodes")
    gpu_count = models.PositiveSmallIntegerField(default=8)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.READY)
    # Agent connection.
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    agent_version = models.CharField(max_length=32, blank=True)
    connected = models.BooleanField(default=False)
    # The agent's current connection, so a late disconnect of an old one changes nothing.
    agent_channel = models.CharField(max_length=100, blank=True, editable=False)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # Level-triggered desired state: bumped whenever the node's assignments change.
    generation = models.PositiveBigIntegerField(default=0)
    reported_generation = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def issue_token(self) -> str:
        """Give the node a new agent token (the old one stops working); return it once."""
        raw = "wn_" + secrets.token_urlsafe(32)
        self.token_hash = hash_token(raw)
        self.save(update_fields=["token_hash"])
        return raw


class Gpu(models.Model):
    """One GPU of a node, as its agent reported it."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, blank=True)
    memory_mb = models.PositiveIntegerField(default=0)
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.READY)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "index"], name="%(app_label)s_%(class)s_unique_index"
            )
        ]

    def __str__(self):
        return f"{self.node}:{self.index}"


class FaultEvent(models.Model):
    """A fault seen on a node (an XID, ECC error, lost heartbeat...) and the workloads it hit."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="faults")
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=32)
    code = models.IntegerField(null=True, blank=True, help_text="XID code where there is one")
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    message = models.TextField(blank=True)
    occurred_at = models.DateTimeField(auto_now_add=True, db_index=True)
    workloads = models.ManyToManyField("workloads.Workload", blank=True, related_name="faults")

    class Meta:
        ordering = ["-occurred_at"]

    def __str__(self):
        return f"{self.kind} on {self.node}"
