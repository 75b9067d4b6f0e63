"""What an operator may do to any tenant's job, each with a reason and audited:

- preempt: it saves first when its policy saves (within its grace), stops, and goes back to
  its queue, to resume from that save;
- requeue: it stops at once, without a save, and goes back to its queue, to resume from its
  newest save (for a job that hangs or will not save);
- checkpoint: its nodes are asked for a save now;
- priority: its priority class changes, and with it its place in its queue;
- cancel: it ends for good.

`impact` says beforehand, in words, what an action would do; `perform` does it, or raises
Conflict when the job's state does not allow it. The tenant reads the reason in the job's
history.
"""

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from portal.core.errors import Conflict
from portal.core.models import audit
from portal.core.triggers import trigger_cycle
from portal.workloads import checkpoints, lifecycle, preemption, words
from portal.workloads.checkpoints import work_lost
from portal.workloads.choices import TRANSITIONS, CheckpointPolicy, PriorityClass, State
from portal.workloads.desired import nodes_changed
from portal.workloads.models import Workload

ACTIONS = ("preempt", "requeue", "checkpoint", "priority", "cancel")


def allowed(workload: Workload) -> list[str]:
    """The actions the workload's state allows now."""
    state = State(workload.state)
    stoppable = State.PREEMPTING in TRANSITIONS[state]
    return [
        action
        for action, ok in (
            ("preempt", stoppable),
            ("requeue", stoppable),
            ("checkpoint", state == State.RUNNING),
            ("priority", not workload.is_finished),
            ("cancel", not workload.is_finished),
        )
        if ok
    ]


def impact(workload: Workload, action: str, now=None) -> list[str]:
    """What `action` would do to the workload, sentence by sentence."""
    held = workload.allocations.count()
    nodes = workload.allocations.values("node_id").distinct().count()
    frees = ngettext(
        "Frees %(gpus)d GPU on %(nodes)d node.",
        "Frees %(gpus)d GPUs on %(nodes)d nodes.",
        held,
    ) % {"gpus": held, "nodes": nodes}
    lost = round(work_lost(workload, now or timezone.now()) / 60)
    redone = _("The work since its newest save (%(minutes)d min) is done again.") % {
        "minutes": lost
    }
    back = _("It goes back to queue %(queue)s and starts again when the engine admits it.") % {
        "queue": workload.queue.name
    }
    saves = workload.checkpoint_policy != CheckpointPolicy.NONE
    if action == "preempt":
        first = (
            _("It saves first (within its grace), so no work is lost.")
            if saves and workload.state == State.RUNNING
            else _("It stops at once: it does not save now.") + " " + redone
        )
        return [first, frees, back]
    if action == "requeue":
        return [_("It stops at once, without a save.") + " " + redone, frees, back]
    if action == "checkpoint":
        return [
            ngettext(
                "Its %(nodes)d node is asked for a save now; it goes on running.",
                "Its %(nodes)d nodes are asked for a save now; it goes on running.",
                nodes,
            )
            % {"nodes": nodes}
        ]
    if action == "priority":
        return [
            _(
                "Its priority class is %(priority)s; a higher one puts it ahead of the jobs of "
                "its queue, and lets the engine preempt lower ones for it."
            )
            % {"priority": PriorityClass(workload.priority).label}
        ]
    ends = _("It ends for good and does not run again.")
    return [ends, frees] if held else [ends]


def perform(workload: Workload, action: str, actor, reason: str, priority=None) -> Workload:
    """Do `action` to the workload for `reason`; Conflict when its state does not allow it."""
    if action not in allowed(workload):
        raise Conflict(f"{workload} is {workload.state}: it cannot be asked to {action}")
    said = words.BY_OPERATOR.format(reason=reason)
    if action == "cancel":
        reason = words.CANCELLED_BY_OPERATOR.format(reason=reason)
        return lifecycle.cancel(workload, actor=actor, reason=reason)
    with transaction.atomic():
        workload = Workload.objects.select_for_update().get(pk=workload.pk)
        details = {"reason": reason}
        if action in ("preempt", "requeue"):
            verb = "preempted" if action == "preempt" else "requeued"
            nodes_changed(preemption.begin(workload, f"{verb} {said}", save=action == "preempt"))
        elif action == "checkpoint":
            checkpoints.ask(workload, "requested", said)
        else:
            details.update(before=workload.priority, after=int(priority))
            Workload.objects.filter(pk=workload.pk).update(priority=int(priority))
        audit(f"workload.{action}", workload, actor=actor, tenant=workload.tenant, **details)
    if action == "priority":
        trigger_cycle()
    return Workload.objects.get(pk=workload.pk)
