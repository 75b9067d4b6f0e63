import secrets
import uuid
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Count, Exists, OuterRef, Q, Subquery
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.cluster.choices import HEALTH_MOVES, CommandState, Health, Severity
from portal.core.errors import Conflict
from portal.core.models import audit
from portal.core.redis import client
from portal.tenancy.models import TenantQuerySet, hash_token
from scheduler import parallelism

# Redis keys "<prefix><node>:<kind>:<gpu>": a fault the node's agent reported lately, whose
# repeats are not recorded again (`portal.agents.limits`).
FAULT_REPEATS = "wanka:faults:seen:"


class GpuModel(models.Model):
    """A kind of GPU the cluster offers, such as H800 or H20."""

    name = models.CharField(max_length=32, unique=True)
    memory_gb = models.PositiveIntegerField()
    # A job may ask for any model of a family ("hopper") instead of naming each.
    family = models.CharField(max_length=32, blank=True, db_index=True)
    worth = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text="What one GPU counts for when fair sharing weighs borrowing across models; "
        "empty: its dense BF16 TFLOPS from the planner's table, else the median of the other "
        "models' worth",
    )

    class Meta:
        ordering = ["name"]
        verbose_name, verbose_name_plural = _("GPU model"), _("GPU models")

    def __str__(self):
        return self.name

    @property
    def weight(self) -> float | None:
        """Its `worth`, else its dense BF16 TFLOPS where the planner knows it, else None (fair
        sharing then counts it as the median of the others: `portal.quotas.engine.worth`)."""
        if self.worth is not None:
            return self.worth
        gpu = parallelism.GPUS.get(self.name)
        return gpu.bf16_tflops if gpu else None


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
    """A spine group inside a data center: the pool of its hot spares, and of defragmentation."""

    datacenter = models.ForeignKey(DataCenter, on_delete=models.PROTECT, related_name="pods")
    name = models.CharField(max_length=64)
    hot_spares = models.PositiveSmallIntegerField(
        default=0,
        help_text=_(
            "Nodes kept free for fault recovery; a repaired node refills the pool when it is short"
        ),
    )
    # Defragmentation (`portal.workloads.defrag`): small jobs that save move within the pod so
    # that whole nodes free up for waiting gangs.
    defrag = models.BooleanField(
        _("defragment"),
        default=False,
        help_text=_(
            "Move small running jobs that save (saving first) to other nodes of the pod so that "
            "whole nodes free up for waiting gangs"
        ),
    )
    defrag_at = models.TimeField(
        _("defragment daily at"),
        null=True,
        blank=True,
        help_text=_("For an hour from this time of day, every day"),
    )
    defrag_when_scattered = models.BooleanField(
        _("defragment when free GPUs are scattered"),
        default=False,
        help_text=_(
            "At any time, whenever a waiting gang has enough free GPUs in the pod but not the "
            "whole nodes"
        ),
    )
    defrag_moves = models.PositiveSmallIntegerField(
        _("moves per hour"),
        default=4,
        help_text=_("At most this many jobs moved in any hour"),
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["datacenter", "name"], name="%(app_label)s_%(class)s_unique_name"
            )
        ]

    def __str__(self):
        return f"{self.datacenter}/{self.name}"

    def clean(self):
        if self.defrag and self.defrag_at is None and not self.defrag_when_scattered:
            raise ValidationError(
                {"defrag": _("Say when: a time of day, or when free GPUs are scattered, or both.")}
            )

    def spares_missing(self) -> int:
        """How many ready spares the pool lacks to meet its target."""
        return max(0, self.hot_spares - Node.objects.filter(leaf__pod=self).ready_spares().count())


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


# What a recovery can move work to, and what a pool of hot spares counts as ready: a node that
# is ready, its agent connected, holding no job's GPUs (`busy`, annotated by `with_busy`).
USABLE = Q(health=Health.READY, connected=True, busy=False)


class NodeQuerySet(models.QuerySet):
    def with_busy(self):
        """Each node annotated with `busy`: whether it holds any job's GPUs."""
        allocations = Node.allocations.field.model.objects.filter(node=OuterRef("pk"))
        return self.annotate(busy=Exists(allocations))

    def usable(self):
        return self.with_busy().filter(USABLE)

    def ready_spares(self):
        return self.usable().filter(spare=True)

    def ready_spares_per_pod(self):
        """A subquery for an annotation of pods: how many ready spares each has."""
        per_pod = self.filter(leaf__pod=OuterRef("pk")).ready_spares().order_by()
        return Subquery(per_pod.values("leaf__pod").annotate(n=Count("pk")).values("n"))


class Node(models.Model):
    """A GPU server (one NVLink island of GPUs) with one node agent."""

    name = models.CharField(max_length=64, unique=True)
    leaf = models.ForeignKey(Leaf, on_delete=models.PROTECT, related_name="nodes")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="nodes")
    gpu_count = models.PositiveSmallIntegerField(default=8)
    health = models.CharField(
        max_length=16, choices=Health.choices, default=Health.READY, editable=False
    )
    health_reason = models.CharField(max_length=300, blank=True, editable=False)
    health_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    spare = models.BooleanField(
        default=False, help_text=_("Hot spare: kept free for fault recovery, never scheduled")
    )
    # What the agent reports of itself: driver, CUDA, NVLink, CPU, memory, NICs, labels.
    facts = models.JSONField(default=dict, blank=True, editable=False)
    # Its agent cannot keep tenants apart (it is not root): it runs one tenant's work at a time.
    single_tenant = models.BooleanField(default=False, editable=False)
    # Agent connection.
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    agent_version = models.CharField(max_length=32, blank=True)
    connected = models.BooleanField(default=False)
    # The agent's current connection, so a late disconnect of an old one changes nothing.
    # The hash of the session its hello was answered with: the same agent proves it with it.
    agent_session = models.CharField(max_length=64, blank=True, editable=False)
    agent_channel = models.CharField(max_length=100, blank=True, editable=False)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # Level-triggered desired state: bumped whenever the node's assignments change.
    generation = models.PositiveBigIntegerField(default=0)
    # As of the agent's last hello; the live value is in Redis (`summary.node_live`).
    reported_generation = models.PositiveBigIntegerField(default=0)
    # When the jobs that failed on it since one last ended well failed (epoch seconds, the
    # latest few; `streaks`).
    recent_failures = models.JSONField(default=list, blank=True, editable=False)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def set_health(self, to: Health, reason: str, actor=None, checked: bool = False) -> None:
        """Move the node along its lifecycle (see HEALTH_MOVES), recording who and why. A
        repaired node goes back to ready only `checked`: once its agent has passed a health
        check (`cluster.checks`)."""
        if to == self.health:
            return
        if to not in HEALTH_MOVES[Health(self.health)]:
            raise Conflict(f"{self} cannot go from {self.health} to {to}")
        if self.health == Health.REPAIRING and to == Health.READY and not checked:
            raise Conflict(f"{self} returns to service once its agent has passed a health check")
        audit(f"node.{to}", self, actor=actor, previous=self.health, reason=reason)
        self.health, self.health_reason, self.health_changed_at = to, reason, timezone.now()
        self.save(update_fields=["health", "health_reason", "health_changed_at"])
        if to == Health.READY:
            self.forget_fault_repeats()
            self.refill_spares()

    def forget_fault_repeats(self) -> None:
        """Back in service, the node has no fault on record that a report could repeat: the
        same fault again (a GPU still off the bus after a repair that did not mend it) is
        recorded, and takes it out again (`portal.agents.limits`)."""
        redis = client()
        if keys := list(redis.scan_iter(f"{FAULT_REPEATS}{self.pk}:*", count=100)):
            redis.delete(*keys)

    def refill_spares(self) -> bool:
        """Join the pod's pool of hot spares when it is short and this node holds no work
        (a repaired node refills what recoveries took). Whether it joined."""
        pod = self.leaf.pod
        if self.spare or pod.spares_missing() == 0 or self.allocations.exists():
            return False
        self.spare = True
        self.save(update_fields=["spare"])
        audit("node.spare", self, reason=f"refills the hot spares of {pod}")
        return True

    def set_spare(self, spare: bool, actor=None, reason: str = "") -> bool:
        """Keep the node as a hot spare (for fault recovery only) or give it back to ordinary
        work, audited. False, changing nothing, when it is so already; Conflict when it should
        become a spare while it holds a job's GPUs: a recovery counts on a spare being free."""
        if self.spare == spare:
            return False
        nodes = Node.objects.filter(pk=self.pk)
        if spare:
            nodes = nodes.filter(allocations__isnull=True)
        if not nodes.update(spare=spare):
            raise Conflict(f"{self} holds GPUs of a job: it cannot be kept as a spare")
        self.spare = spare
        audit("node.spare" if spare else "node.unspare", self, actor=actor, reason=reason)
        return True

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
    # Its MIG mode and MIG devices as its agent last reported them ({}: MIG off, or a GPU
    # without it); `portal.cluster.mig`.
    mig = models.JSONField(default=dict, blank=True, editable=False)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(
                fields=["node", "index"], name="%(app_label)s_%(class)s_unique_index"
            )
        ]
        indexes = [
            # The GPUs with a MIG layout, which every scheduling cycle reads: a few among
            # 100,000 rows.
            models.Index(fields=["node"], condition=~models.Q(mig={}), name="cluster_gpu_with_mig")
        ]

    def __str__(self):
        return f"{self.node}:{self.index}"


class FaultQuerySet(TenantQuerySet):
    def of_tenant(self, tenant_id: int) -> models.QuerySet:
        """A tenant sees the faults that hit its workloads."""
        return self.filter(workloads__tenant_id=tenant_id).distinct()


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

    objects = FaultQuerySet.as_manager()

    class Meta:
        ordering = ["-occurred_at", "-id"]

    def __str__(self):
        return f"{self.kind} on {self.node}"


class BootstrapToken(models.Model):
    """A one-time token an operator hands to a new node so its agent can enrol itself."""

    PREFIX = "wb_"

    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    note = models.CharField(max_length=200, blank=True, help_text="Which machine it is for")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(editable=False)
    used_at = models.DateTimeField(null=True, blank=True, editable=False)
    node = models.ForeignKey(
        Node,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
        help_text="The node it enrolled",
    )
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self):
        return self.note or f"bootstrap token {self.pk}"

    VALID_FOR = timedelta(days=1)

    def new_secret(self) -> str:
        """Give this (unsaved) token its secret and expiry; return the raw value, shown once."""
        raw = self.PREFIX + secrets.token_urlsafe(32)
        self.token_hash, self.expires_at = hash_token(raw), timezone.now() + self.VALID_FOR
        return raw

    @classmethod
    def issue(cls, note: str = "", actor=None) -> tuple:
        """Create a token and return it with the raw value."""
        token = cls(note=note, created_by=actor)
        raw = token.new_secret()
        token.save()
        return token, raw


class NodeCommand(models.Model):
    """A command sent to a node's agent (a checkpoint, or a fault drill) and its ack.

    The id travels on the wire; an agent acks a repeated id without running it again, so the
    server may resend unacknowledged commands whenever the agent reconnects."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="commands")
    action = models.CharField(max_length=16)
    workload = models.ForeignKey(
        "workloads.Workload",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="commands",
    )
    args = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=8, choices=CommandState.choices, default=CommandState.SENT)
    detail = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["node", "state"])]

    def __str__(self):
        return f"{self.action} on {self.node}"

    def message(self) -> dict:
        """The `command` message fields."""
        return {
            "command_id": str(self.id),
            "action": self.action,
            "workload_id": self.workload_id,
            "args": self.args,
        }
