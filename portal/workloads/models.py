from django.conf import settings
from django.db import models, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.cluster.models import GpuModel, Node
from portal.core.errors import Conflict
from portal.core.live import OPS_GROUP, publish, publish_tenant
from portal.quotas.models import Queue
from portal.tenancy.models import Tenant, TenantQuerySet
from portal.workloads.choices import (
    TERMINAL,
    TRANSITIONS,
    CheckpointKind,
    CheckpointPolicy,
    CheckpointStatus,
    Kind,
    PriorityClass,
    RecoveryOutcome,
    RecoveryStep,
    State,
    Topology,
)
from portal.workloads.reasons import readable
from scheduler.engine.model import SLICES
from scheduler.mig import Profile, profiles


class IllegalTransition(Conflict):
    """A state change the workload state machine forbids, or one that lost a race."""


class Workload(models.Model):
    """A job a tenant submitted: training, fine-tuning or inference on a gang of GPUs."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="workloads")
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="workloads")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.TRAINING)
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    # Every GPU model it may run on, in its submitter's order, when it accepts more than one:
    # the cycle starts it on the fastest with room (`scheduler.engine.Workload.accepts`), and
    # `gpu_model` becomes the one it runs on.
    accepts = models.JSONField(default=list, blank=True)
    gpus = models.PositiveIntegerField()
    # A share of one GPU in eighths (1-7, with `gpus` 1): the larger of the compute and the
    # memory asked, rounded up; 0: `gpus` whole GPUs.
    slices = models.PositiveSmallIntegerField(default=0)
    # A MIG profile of one GPU ("1g.10gb", with `gpus` 1 and `slices` 0; `scheduler.mig`);
    # "": none.
    mig = models.CharField(max_length=16, blank=True, default="")
    min_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Elastic lower bound")
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Elastic upper bound")
    priority = models.IntegerField(choices=PriorityClass.choices, default=PriorityClass.NORMAL)
    topology = models.CharField(
        max_length=16, choices=Topology.choices, default=Topology.DATACENTER
    )
    topology_required = models.BooleanField(default=False)
    checkpoint_policy = models.CharField(
        max_length=16, choices=CheckpointPolicy.choices, default=CheckpointPolicy.ASYNC
    )
    checkpoint_interval_s = models.PositiveIntegerField(null=True, blank=True)
    command = models.TextField(blank=True)
    env = models.JSONField(default=dict, blank=True)
    serve_port = models.PositiveIntegerField(
        null=True, blank=True, help_text="An inference replica serves HTTP on this port ($PORT)"
    )
    spread = models.CharField(
        max_length=64, blank=True, help_text="Placed apart from the others of this group"
    )
    # False: never moved while it runs (defragmentation, a faster GPU model); it stays where it
    # started until it ends, is preempted, or a fault moves it.
    movable = models.BooleanField(
        default=True, help_text="False: never moved to other GPUs while it runs"
    )
    time_limit_s = models.PositiveIntegerField(null=True, blank=True)
    simulated_duration_s = models.FloatField(
        null=True, blank=True, help_text="Run time on simulated nodes; real agents ignore it"
    )
    # A job that names its model and batch is handed a parallel plan (`parallel.py`).
    model_spec = models.JSONField(
        null=True, blank=True, help_text="The model it trains, as scheduler.parallelism takes it"
    )
    global_batch = models.PositiveIntegerField(
        null=True, blank=True, help_text="Sequences per training step"
    )
    # Written only by transition().
    state = models.CharField(
        max_length=16, choices=State.choices, default=State.PENDING, editable=False, db_index=True
    )
    pending_reason = models.CharField(max_length=300, blank=True)
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    # Refreshed by `eta.refresh`, only while pending; None: later than the estimate's horizon.
    estimated_start = models.DateTimeField(null=True, blank=True, editable=False)
    estimated_start_p90 = models.DateTimeField(null=True, blank=True, editable=False)
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    submitted_at = models.DateTimeField(default=timezone.now, db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    # Bumped on every restart after a fault: agents restart a workload whose attempt changed.
    attempt = models.PositiveIntegerField(default=0, editable=False)
    # Requeued after a fault: it goes before the rest of its queue.
    head_of_queue = models.BooleanField(default=False, editable=False)
    preemption_grace_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="Time to save when preempted; empty: its queue's"
    )
    # While PREEMPTING (`preemption.py`): when it began, when it was told to stop (empty while
    # it saves), and the deadline of the step it is in.
    preempted_at = models.DateTimeField(null=True, blank=True, editable=False)
    stop_requested_at = models.DateTimeField(null=True, blank=True, editable=False)
    preempt_deadline = models.DateTimeField(null=True, blank=True, editable=False)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "state"]),
            # A tenant's newest first (every list's first page) is one index range, not a sort
            # of all its workloads.
            models.Index(fields=["tenant", "-submitted_at", "-id"], name="workload_tenant_newest"),
        ]

    def __str__(self):
        return self.name

    @property
    def gpu_share(self) -> int | float:
        """GPUs asked for: its whole GPUs, or its share of one (0.25); a MIG job's one GPU."""
        return self.slices / SLICES if self.slices else self.gpus

    @property
    def charged(self) -> int | float:
        """GPUs it counts for in quota, budgets and reports: a MIG job its profile's charge,
        else `gpu_share`."""
        return self.mig_profile.charge if self.mig else self.gpu_share

    @property
    def mig_profile(self) -> Profile:
        """Its MIG profile (a MIG job only): what it holds of its GPU, and is charged."""
        return profiles(self.gpu_model.name, self.gpu_model.memory_gb)[self.mig]

    @property
    def is_finished(self) -> bool:
        return self.state in TERMINAL


# Timestamps stamped on entering a state.
_STAMPS = {
    State.ADMITTED: "admitted_at",
    State.RUNNING: "started_at",
    **{state: "finished_at" for state in TERMINAL},
}


def transition(workload: Workload, to: State, reason: str = "", actor=None, **fields) -> None:
    """Move `workload` to state `to`: the only code that writes Workload.state.

    Checks the move is legal, claims it with a conditional update (a racing caller that already
    moved the workload makes this one raise), records a WorkloadEvent and tells the tenant's
    browsers once the transaction commits. `fields` are saved in the same update.
    """
    source = State(workload.state)
    if to not in TRANSITIONS[source]:
        raise IllegalTransition(f"{workload} cannot go from {source} to {to}")
    now = timezone.now()
    if to in _STAMPS and not (to == State.RUNNING and workload.started_at):
        fields[_STAMPS[to]] = now
    with transaction.atomic():
        moved = Workload.objects.filter(pk=workload.pk, state=source).update(state=to, **fields)
        if not moved:
            raise IllegalTransition(f"{workload} is no longer {source}")
        event = WorkloadEvent.objects.create(
            workload=workload,
            from_state=source,
            to_state=to,
            reason=reason,
            actor=actor if actor and actor.pk else None,
        )
    workload.state = to
    for name, value in fields.items():
        setattr(workload, name, value)
    _announce(workload, event)


def note(workload: Workload, reason: str, actor=None) -> None:
    """Record something that happened to a workload without a change of state (a shrink)."""
    event = WorkloadEvent.objects.create(
        workload=workload,
        from_state=workload.state,
        to_state=workload.state,
        reason=reason,
        actor=actor if actor and actor.pk else None,
    )
    _announce(workload, event)


def _announce(workload: Workload, event: "WorkloadEvent") -> None:
    """Tell the tenant's browsers, and the operators' (which job, no more: their open job
    pages draw themselves again). `version` (the event's id) grows with every event of the
    workload, so a page applies only what is newer than what it shows."""
    publish(OPS_GROUP, "workload.state", {"id": workload.pk, "version": event.pk})
    publish_tenant(
        workload.tenant_id,
        "workload.state",
        {
            "id": workload.pk,
            "name": workload.name,
            "state": event.to_state,
            "reason": readable(event.reason, workload),
            "version": event.pk,
        },
    )


class ParallelPlan(models.Model):
    """The parallel plan a workload was handed for the GPUs it held, and why it changed."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="parallel_plans")
    attempt = models.PositiveIntegerField()
    gpus = models.PositiveIntegerField()
    plan = models.JSONField()
    reason = models.CharField(max_length=300)
    created_at = models.DateTimeField(default=timezone.now)
    # Seconds per iteration the job measured on this plan (its latest run's steps over time,
    # `portal.workloads.calibration`), against `plan["predicted"]["iteration_s"]`.
    measured_s = models.FloatField(null=True, blank=True)
    measured_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["workload", "id"]
        # The calibration reads the newest measurements of the whole fleet.
        indexes = [models.Index(fields=["measured_at"], name="workloads_plan_measured_at")]

    def __str__(self):
        layout = self.plan
        if not layout:
            return f"no layout fits {self.gpus} GPUs"
        return f"TP{layout['tp']} x PP{layout['pp']} x DP{layout['dp']} on {self.gpus} GPUs"


class RunPace(models.Model):
    """How fast one run (attempt) of a workload went: its seconds per iteration on the GPUs it
    held, as the fleet's calibration times them (`portal.workloads.calibration`). A job the
    planner knows nothing of is started where its earlier runs went fastest."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="paces")
    attempt = models.PositiveIntegerField()
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    gpus = models.PositiveIntegerField()
    step_s = models.FloatField()
    measured_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workload", "attempt"], name="workloads_pace_run")
        ]

    def __str__(self):
        return f"{self.step_s:.3g} s per iteration on {self.gpus} GPUs"


class WorkloadEvent(models.Model):
    """One state change of a workload, with why and by whom: its timeline."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16, choices=State.choices)
    to_state = models.CharField(max_length=16, choices=State.choices)
    reason = models.CharField(max_length=300, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Seconds of work done before this event that is lost (a preemption with no save since):
    # ETTR books it as lost, not productive.
    lost_s = models.FloatField(default=0)

    class Meta:
        ordering = ["at", "id"]
        # A workload's newest event (its version, read for every row of a list) is one index
        # probe; without it PostgreSQL walks the primary key back for a job with no events.
        indexes = [models.Index(fields=["workload", "-id"], name="workload_event_newest")]

    def __str__(self):
        return f"{self.workload}: {self.from_state} -> {self.to_state}"


class Allocation(models.Model):
    """One GPU, or a share of one, booked to one workload.

    The unique constraint makes booking a whole GPU twice impossible; `allocations.create`,
    under a lock of the nodes, refuses a GPU whose shares would pass eight eighths or that
    would hold shares beside a whole booking."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    gpu_index = models.PositiveSmallIntegerField()
    slices = models.PositiveSmallIntegerField(default=0, help_text="Eighths of the GPU; 0: all")
    # The node's place in the gang (0 is the master), fixed at admission.
    node_rank = models.PositiveIntegerField(default=0)
    started = models.BooleanField(default=False, help_text="The node's agent runs the workload")
    exit_code = models.IntegerField(null=True, blank=True, help_text="How the node's part ended")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["node", "gpu_index"],
                condition=models.Q(slices=0),
                name="%(app_label)s_%(class)s_unique_gpu_allocation",
            )
        ]
        indexes = [
            models.Index(fields=["workload", "node_rank"]),
            # Is any node of the gang still to start? Asked once per node report.
            models.Index(
                fields=["workload"],
                condition=models.Q(started=False),
                name="workloads_alloc_unstarted",
            ),
        ]

    def __str__(self):
        return f"{self.node}:{self.gpu_index} -> {self.workload}"


class Checkpoint(models.Model):
    """A saved training state a workload can resume from."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=16, choices=CheckpointKind.choices)
    location = models.CharField(max_length=500)
    size_bytes = models.PositiveBigIntegerField(default=0)
    duration_s = models.FloatField(default=0)
    # The part of the save during which training stood still (all of a periodic save, the
    # copy to host memory of an asynchronous one).
    stall_s = models.FloatField(default=0)
    status = models.CharField(
        max_length=16, choices=CheckpointStatus.choices, default=CheckpointStatus.IN_PROGRESS
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-step", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "step"], name="%(app_label)s_%(class)s_unique_step"
            )
        ]

    def __str__(self):
        return f"{self.workload} step {self.step}"


class UsageRecord(models.Model):
    """GPU-hours booked to a tenant for one stretch of a workload's run."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage")
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="usage")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+")
    gpus = models.FloatField(help_text="GPUs held, a share as its share")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField()
    gpu_hours = models.FloatField()

    class Meta:
        ordering = ["-ended_at", "-id"]

    def __str__(self):
        return f"{self.gpu_hours:.1f} GPU-hours of {self.workload}"


class Recovery(models.Model):
    """The recovery of one workload from one fault: a state machine on a row, so that a worker
    killed at any step leaves it for the next one to resume (see recovery.py)."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="recoveries")
    fault = models.ForeignKey(
        "cluster.FaultEvent", null=True, on_delete=models.SET_NULL, related_name="recoveries"
    )
    step = models.CharField(max_length=16, choices=RecoveryStep.choices)
    outcome = models.CharField(max_length=16, choices=RecoveryOutcome.choices, blank=True)
    detail = models.CharField(max_length=500, blank=True)
    # Nodes the workload loses, and where it restarts from.
    lost_nodes = models.JSONField(default=list)
    # A shrink that saves first: the [node id, GPU indices] it gives back once saved.
    release = models.JSONField(default=list, blank=True)
    resume_step = models.PositiveBigIntegerField(null=True, blank=True)
    resume_location = models.CharField(max_length=500, blank=True)
    lost_s = models.FloatField(default=0, help_text="Work redone: fault time minus the save's")
    started_at = models.DateTimeField(auto_now_add=True)
    save_deadline = models.DateTimeField(null=True, blank=True)
    # Touched by every pass of a worker; a stale one is picked up by the sweeper.
    updated_at = models.DateTimeField(auto_now=True)
    restart_pushed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name, verbose_name_plural = _("recovery"), _("recoveries")
        constraints = [
            models.UniqueConstraint(
                fields=["workload"],
                condition=~models.Q(step="done"),
                name="%(app_label)s_%(class)s_one_active",
            )
        ]

    def __str__(self):
        return f"recovery of {self.workload} ({self.step})"


class LogChunk(models.Model):
    """Output of one run (attempt) of a workload on one node, one batch a row as its agent
    shipped it (`logs` messages): lines joined by newlines, from byte `offset` of the run's
    output on. Rows are the cursor of readers (`id`), and go by age and size (`logs.trim`)."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="log_chunks")
    attempt = models.PositiveIntegerField()
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+")
    offset = models.PositiveBigIntegerField()
    text = models.TextField()
    lines = models.PositiveIntegerField()
    size = models.PositiveIntegerField()  # characters of text, for the size limit
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["workload", "id"], name="logchunk_workload_id")]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "attempt", "node", "offset"], name="logchunk_once"
            )
        ]

    def __str__(self):
        return f"{self.workload} attempt {self.attempt} on {self.node_id} at {self.offset}"


def with_version(workloads: models.QuerySet) -> models.QuerySet:
    """`workloads`, each with its `version`: the id of its newest event (see `_announce`)."""
    newest = WorkloadEvent.objects.filter(workload=models.OuterRef("pk")).order_by("-id")
    return workloads.annotate(version=models.Subquery(newest.values("id")[:1]))
