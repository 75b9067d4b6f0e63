"""What happens to a job, in the sentences of its timeline, its recoveries and its plans:
templates (`scheduler.words.phrase`) that the portal renders in the reader's language."""

from portal.workloads.choices import RecoveryOutcome
from scheduler.words import phrase

# States
PROCESSES_STARTING = phrase("processes starting")
RUNNING_ON = phrase("running on {nodes} node(s)")
EXITED = phrase("exited with code {code}")
RESTART_EXITED = phrase("its restart exited with code {code}")
PAST_TIME_LIMIT = phrase("ran past its time limit of {seconds} s")
CANCELLED_BY_USER = phrase("cancelled by user")
CANCELLED_BY_OPERATOR = phrase("cancelled by an operator: {reason}")
BY_OPERATOR = phrase("by an operator: {reason}")
NOT_SENT = phrase("cannot be sent to its nodes: {why}")
PLACED = phrase("placed on {nodes} node"), phrase("placed on {nodes} nodes")
PLACED_SMALLER = phrase("{placed}, on {gpus} of its {asked} GPUs (elastic: all that is free)")
PLACED_CHOSEN = phrase("{placed} (GPU model {choice})")
# Preemption
REQUEUED_FROM_SAVE = phrase("requeued after preemption, from its save")
REQUEUED_LOST = phrase("requeued after preemption; {seconds} s of work since its last save lost")
# Faults and recovery
DID_NOT_STOP = phrase("workload {workload} did not stop within {seconds} s")
FAULT_ON = phrase("{code} on {node}: {title}")
HIT_WHILE_RESTARTING = phrase("{code} on {node} while restarting: recovering again without it")
GIVEN_UP = phrase("given up: {code} on {node}")
SAVED_BEFORE_RESIZE = phrase("saved before the resize")
SAVED_FROM_MEMORY = phrase("the healthy ranks saved from memory")
SAVE_FAILED = phrase(
    "the save before the resize failed; falling back to the newest complete checkpoint"
)
TRIGGERED_FAILED = phrase(
    "the triggered save failed; falling back to the newest complete checkpoint"
)
SAVE_LATE = phrase("the save before the resize timed out after {seconds} s; falling back")
TRIGGERED_LATE = phrase("the triggered save timed out after {seconds} s; falling back")
REQUEUED_AFTER_FAULT = phrase("requeued at the head of its queue after a fault")
SHRUNK_TO = phrase("shrunk to {gpus} GPUs: {why}")
RECOVERED_ONTO = phrase("recovered onto {gpus} GPUs without the lost nodes")
OUTCOMES = {
    RecoveryOutcome.IN_PLACE: phrase("restarted in place"),
    RecoveryOutcome.SPARE: phrase("restarted on hot spares"),
    RecoveryOutcome.SHRUNK: phrase("shrunk and restarted"),
    RecoveryOutcome.GROWN: phrase("grown and restarted"),
    RecoveryOutcome.MOVED: phrase("moved to a faster GPU model and restarted"),
    RecoveryOutcome.DEFRAGMENTED: phrase("moved to free whole nodes and restarted"),
    RecoveryOutcome.REQUEUED: phrase("requeued at the head of its queue"),
    RecoveryOutcome.ENDED: phrase("ended while recovering"),
}
FROM_STEP = phrase("{outcome}, from step {step}")
FROM_START = phrase("{outcome}, from the start (no complete checkpoint)")
RECOVERED = phrase("recovered: running again")
# Parallel plans
ADMITTED_ON = phrase("admitted on {gpus} GPUs")
ADMITTED_ACROSS = phrase("admitted on {gpus} GPUs in {datacenters} data centers")
PLANNED_AS_ONE = phrase(
    "{reason} (planned as in one data center: no layout splits over {datacenters})"
)
NO_LAYOUT = phrase("no layout of {model} fits {gpus} {gpu} GPUs: {reason}")
