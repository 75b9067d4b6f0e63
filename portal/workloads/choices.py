from django.db import models
from django.utils.translation import gettext_lazy as _


class State(models.TextChoices):
    PENDING = "pending", _("Pending")
    ADMITTED = "admitted", _("Admitted")
    STARTING = "starting", _("Starting")
    RUNNING = "running", _("Running")
    PREEMPTING = "preempting", _("Preempting")
    RECOVERING = "recovering", _("Recovering")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")
    # A service's replica its autoscaler scaled down, or stopped with its service: an end its
    # owner asked for through the service, neither a failure nor a person's cancel.
    STOPPED = "stopped", _("Stopped")


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED, State.STOPPED})
# States in which a workload holds GPUs.
HOLDING = frozenset(
    {State.ADMITTED, State.STARTING, State.RUNNING, State.PREEMPTING, State.RECOVERING}
)

# The workload state machine of the design: every legal move, nothing else.
TRANSITIONS = {
    State.PENDING: {State.ADMITTED, State.CANCELLED, State.STOPPED},
    State.ADMITTED: {
        State.STARTING,
        State.RUNNING,
        State.FAILED,
        State.CANCELLED,
        State.STOPPED,
        State.PREEMPTING,
        State.RECOVERING,
    },
    State.STARTING: {
        State.RUNNING,
        State.FAILED,
        State.CANCELLED,
        State.STOPPED,
        State.PREEMPTING,
        State.RECOVERING,
    },
    State.RUNNING: {
        State.SUCCEEDED,
        State.FAILED,
        State.CANCELLED,
        State.STOPPED,
        State.PREEMPTING,
        State.RECOVERING,
    },
    State.PREEMPTING: {State.PENDING, State.FAILED, State.CANCELLED, State.STOPPED},
    State.RECOVERING: {
        State.RUNNING,
        State.PENDING,
        State.FAILED,
        State.CANCELLED,
        State.STOPPED,
    },
    State.SUCCEEDED: set(),
    State.FAILED: set(),
    State.CANCELLED: set(),
    State.STOPPED: set(),
}


class Kind(models.TextChoices):
    TRAINING = "training", _("Training")
    SFT = "sft", _("Fine-tuning (SFT)")
    INFERENCE = "inference", _("Inference")


class PriorityClass(models.IntegerChoices):
    LOW = 0, _("Low")
    NORMAL = 100, _("Normal")
    HIGH = 200, _("High")
    CRITICAL = 300, _("Critical")


class Topology(models.TextChoices):
    """The tightest network domain a job's GPUs should share (see TopologyLevel)."""

    NODE = "node", _("One node")
    LEAF = "leaf", _("One leaf switch")
    POD = "pod", _("One pod")
    DATACENTER = "datacenter", _("One data center")
    ANY = "any", _("Any data center in the region")


class CheckpointPolicy(models.TextChoices):
    NONE = "none", _("None")
    PERIODIC = "periodic", _("Periodic (stop the world)")
    ASYNC = "async", _("Asynchronous")
    TRIGGERED = "triggered", _("Fault-triggered")


class CheckpointKind(models.TextChoices):
    PERIODIC = "periodic", _("Periodic")
    ASYNC = "async", _("Asynchronous")
    TRIGGERED = "triggered", _("Fault-triggered")
    REQUESTED = "requested", _("On request")


class CheckpointStatus(models.TextChoices):
    IN_PROGRESS = "in_progress", _("In progress")
    COMPLETE = "complete", _("Complete")
    PARTIAL = "partial", _("Partial")
    FAILED = "failed", _("Failed")
    # Past retention: its node is asked to delete its files; the row stays for the job's time
    # accounting. DELETED: the node has deleted them.
    PRUNED = "pruned", _("Pruned")
    DELETED = "deleted", _("Deleted")


class RecoveryStep(models.TextChoices):
    """Where a recovery stands; each step is one transaction, so a worker may die anywhere."""

    SAVING = "saving", _("Healthy ranks saving")
    REPLACING = "replacing", _("Replacing lost nodes")
    RESTARTING = "restarting", _("Restarting from the checkpoint")
    DONE = "done", _("Done")


class RecoveryOutcome(models.TextChoices):
    IN_PLACE = "in_place", _("Restarted in place")
    SPARE = "spare", _("Restarted on hot spares")
    SHRUNK = "shrunk", _("Shrunk and restarted")
    GROWN = "grown", _("Grown and restarted")
    MOVED = "moved", _("Moved to a faster GPU model and restarted")
    DEFRAGMENTED = "defragmented", _("Moved to free whole nodes and restarted")
    REQUEUED = "requeued", _("Requeued at the head of its queue")
    ENDED = "ended", _("Ended while recovering")
