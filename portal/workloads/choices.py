from django.db import models


class State(models.TextChoices):
    PENDING = "pending", "Pending"
    ADMITTED = "admitted", "Admitted"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    PREEMPTING = "preempting", "Preempting"
    RECOVERING = "recovering", "Recovering"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


TERMINAL = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})
# States in which a workload holds GPUs.
HOLDING = frozenset(
    {State.ADMITTED, State.STARTING, State.RUNNING, State.PREEMPTING, State.RECOVERING}
)

# The workload state machine of the design: every legal move, nothing else.
TRANSITIONS = {
    State.PENDING: {State.ADMITTED, State.CANCELLED},
    State.ADMITTED: {
        State.STARTING,
        State.RUNNING,
        State.FAILED,
        State.CANCELLED,
        State.PREEMPTING,
        State.RECOVERING,
    },
    State.STARTING: {
        State.RUNNING,
        State.FAILED,
        State.CANCELLED,
        State.PREEMPTING,
        State.RECOVERING,
    },
    State.RUNNING: {
        State.SUCCEEDED,
        State.FAILED,
        State.CANCELLED,
        State.PREEMPTING,
        State.RECOVERING,
    },
    State.PREEMPTING: {State.PENDING, State.FAILED, State.CANCELLED},
    State.RECOVERING: {State.RUNNING, State.PENDING, State.FAILED, State.CANCELLED},
    State.SUCCEEDED: set(),
    State.FAILED: set(),
    State.CANCELLED: set(),
}


class Kind(models.TextChoices):
    TRAINING = "training", "Training"
    SFT = "sft", "Fine-tuning (SFT)"
    INFERENCE = "inference", "Inference"


class PriorityClass(models.IntegerChoices):
    LOW = 0, "Low"
    NORMAL = 100, "Normal"
    HIGH = 200, "High"
    CRITICAL = 300, "Critical"


class Topology(models.TextChoices):
    """The tightest network domain a job's GPUs should share (see TopologyLevel)."""

    NODE = "node", "One node"
    LEAF = "leaf", "One leaf switch"
    POD = "pod", "One pod"
    DATACENTER = "datacenter", "One data center"
    ANY = "any", "Any data center in the region"


class CheckpointPolicy(models.TextChoices):
    NONE = "none", "None"
    PERIODIC = "periodic", "Periodic (stop the world)"
    ASYNC = "async", "Asynchronous"
    TRIGGERED = "triggered", "Fault-triggered"


class CheckpointKind(models.TextChoices):
    PERIODIC = "periodic", "Periodic"
    ASYNC = "async", "Asynchronous"
    TRIGGERED = "triggered", "Fault-triggered"
    REQUESTED = "requested", "On request"


class CheckpointStatus(models.TextChoices):
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETE = "complete", "Complete"
    PARTIAL = "partial", "Partial"
    FAILED = "failed", "Failed"
    # Past retention: its files may be deleted; the row stays for the job's time accounting.
    PRUNED = "pruned", "Pruned"


class RecoveryStep(models.TextChoices):
    """Where a recovery stands; each step is one transaction, so a worker may die anywhere."""

    SAVING = "saving", "Healthy ranks saving"
    REPLACING = "replacing", "Replacing lost nodes"
    RESTARTING = "restarting", "Restarting from the checkpoint"
    DONE = "done", "Done"


class RecoveryOutcome(models.TextChoices):
    IN_PLACE = "in_place", "Restarted in place"
    SPARE = "spare", "Restarted on hot spares"
    SHRUNK = "shrunk", "Shrunk and restarted"
    GROWN = "grown", "Grown and restarted"
    REQUEUED = "requeued", "Requeued at the head of its queue"
    ENDED = "ended", "Ended while recovering"
