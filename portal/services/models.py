from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from portal.cluster.models import GpuModel
from portal.core.models import counted
from portal.quotas.models import Queue
from portal.tenancy.models import Tenant, TenantQuerySet
from portal.workloads.choices import TERMINAL, PriorityClass
from portal.workloads.models import Workload
from scheduler.engine.model import SLICES


class Service(models.Model):
    """An inference service: replicas of one server, as many as its load needs (`autoscaling`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="services")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="services")
    name = models.SlugField(max_length=60)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    gpus_per_replica = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    # A replica of a share of one GPU (as a job's `Workload.slices`): eighths of it; 0: whole.
    replica_slices = models.PositiveSmallIntegerField(default=0)
    min_replicas = models.PositiveIntegerField(default=1)
    max_replicas = models.PositiveIntegerField(default=10, validators=[MaxValueValidator(1000)])
    target_concurrency = models.FloatField(
        default=8, validators=[MinValueValidator(0.1)], help_text="Requests in flight per replica"
    )
    scale_to_zero = models.BooleanField(default=False)
    stable_window_s = models.PositiveIntegerField(
        default=60,
        validators=[MinValueValidator(6), MaxValueValidator(3600)],
        help_text="The load is averaged over this window; the panic window is a tenth of it",
    )
    scale_down_delay_s = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(3600)],
        help_text="A scale-down waits this long: the most wanted within it counts",
    )
    priority = models.IntegerField(choices=PriorityClass.choices, default=PriorityClass.HIGH)
    command = models.TextField(blank=True, help_text="Serves HTTP on $PORT")
    port = models.PositiveIntegerField(
        default=8000, validators=[MinValueValidator(1), MaxValueValidator(65535)]
    )
    active = models.BooleanField(default=True, editable=False)  # False: stopped, replicas gone
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # The autoscaler's, written each tick.
    desired_replicas = models.PositiveIntegerField(default=0, editable=False)
    panic = models.BooleanField(default=False, editable=False)
    scale_reason = models.CharField(max_length=200, blank=True, editable=False)
    autoscaler_state = models.JSONField(default=dict, editable=False)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], name="%(app_label)s_%(class)s_unique_name"
            )
        ]

    def __str__(self):
        return self.name

    @property
    def replica_share(self) -> int | float:
        """GPUs per replica: whole ones, or a share of one (0.25), as `Workload.gpu_share`."""
        return self.replica_slices / SLICES if self.replica_slices else self.gpus_per_replica


def with_live_replicas(services):
    """`services` with `live_replicas`: how many of each one's replicas have not ended."""
    live = Replica.objects.exclude(workload__state__in=TERMINAL)
    return services.annotate(live_replicas=counted(live, "service"))


class Replica(models.Model):
    """A workload serving a service. Where it listens and its load come with its node's
    heartbeats (`load.serving`)."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="replicas")
    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, related_name="replica")
    # Scaled down: out of the endpoints, stopped once idle or after `autoscaling.DRAIN_S`.
    draining_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self):
        return f"{self.service} / {self.workload}"


class ServiceSample(models.Model):
    """The service at one autoscaler tick: its load and replicas, for its chart."""

    service = models.ForeignKey(Service, on_delete=models.CASCADE, related_name="samples")
    at = models.DateTimeField()
    in_flight = models.PositiveIntegerField()
    requests_per_s = models.FloatField()
    ready = models.PositiveIntegerField()
    desired = models.PositiveIntegerField()

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["service", "at"])]

    def __str__(self):
        return f"{self.service} at {self.at:%H:%M:%S}"
