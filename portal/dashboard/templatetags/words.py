"""`{{ value|word }}`: a state, status or recovery step as the reader's language names it (the
raw value in English, as the API has it), `{{ code|fault_title }}`, a fault kind's title, and
`{{ share|percent }}`, a share (0.045) in per cent (4.5) as the reader's language writes it.

The values stay lowercase identifiers in English so that pages and the API read alike; the
fault catalogue (`scheduler.faults`) is pure Python without Django, so its titles are
translated here, by code."""

from django import template
from django.template.defaultfilters import floatformat
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from scheduler import faults

register = template.Library()

# Written out, not made in a loop, so that makemessages finds each one.
WORDS = {
    # workload states
    "pending": pgettext_lazy("value", "pending"),
    "admitted": pgettext_lazy("value", "admitted"),
    "starting": pgettext_lazy("value", "starting"),
    "running": pgettext_lazy("value", "running"),
    "preempting": pgettext_lazy("value", "preempting"),
    "recovering": pgettext_lazy("value", "recovering"),
    "succeeded": pgettext_lazy("value", "succeeded"),
    "failed": pgettext_lazy("value", "failed"),
    "cancelled": pgettext_lazy("value", "cancelled"),
    "stopped": pgettext_lazy("value", "stopped"),
    # quota requests
    "approved": pgettext_lazy("value", "approved"),
    "rejected": pgettext_lazy("value", "rejected"),
    # recovery steps and outcomes
    "saving": pgettext_lazy("value", "saving"),
    "replacing": pgettext_lazy("value", "replacing"),
    "restarting": pgettext_lazy("value", "restarting"),
    "done": pgettext_lazy("value", "done"),
    "in_place": pgettext_lazy("value", "in_place"),
    "spare": pgettext_lazy("value", "spare"),
    "shrunk": pgettext_lazy("value", "shrunk"),
    "grown": pgettext_lazy("value", "grown"),
    "requeued": pgettext_lazy("value", "requeued"),
    "ended": pgettext_lazy("value", "ended"),
    # fault severities and node actions
    "info": pgettext_lazy("value", "info"),
    "warning": pgettext_lazy("value", "warning"),
    "critical": pgettext_lazy("value", "critical"),
    "none": pgettext_lazy("value", "none"),
    "restart_process": pgettext_lazy("value", "restart_process"),
    "reset_gpu": pgettext_lazy("value", "reset_gpu"),
    "drain_node": pgettext_lazy("value", "drain_node"),
    "reboot_node": pgettext_lazy("value", "reboot_node"),
    "repair": pgettext_lazy("value", "repair"),
    # recompute and checkpoint policies
    "selective": pgettext_lazy("value", "selective"),
    "full": pgettext_lazy("value", "full"),
    "periodic": pgettext_lazy("value", "periodic"),
    "async": pgettext_lazy("value", "async"),
    "triggered": pgettext_lazy("value", "triggered"),
}

TITLES = {
    "xid-13": _("Graphics engine exception"),
    "xid-31": _("GPU memory page fault"),
    "xid-43": _("GPU stopped processing"),
    "xid-45": _("Preemptive cleanup"),
    "xid-48": _("Double-bit ECC error"),
    "xid-63": _("Row remapping pending"),
    "xid-64": _("Row remapping failed"),
    "xid-74": _("NVLink error"),
    "xid-79": _("GPU fell off the bus"),
    "xid-92": _("High single-bit ECC rate"),
    "xid-94": _("Contained ECC error"),
    "xid-95": _("Uncontained ECC error"),
    "xid-119": _("GSP RPC timeout"),
    "xid-120": _("GSP error"),
    "ecc-dbe": _("Uncorrectable ECC error"),
    "ecc-sbe-storm": _("Retired-pages limit reached"),
    "nvlink-down": _("NVLink down"),
    "nic-down": _("Network link down"),
    "heartbeat-loss": _("Heartbeats stopped"),
    "hang": _("Training hung"),
    "straggler": _("Straggler"),
    "drain": _("Node drained"),
    "node-down": _("Node marked down"),
    "slow-node": _("Slow node"),
}

MEANINGS = {
    "xid-13": _(
        "A kernel hit an exception, usually an application bug (bad index, bad "
        "instruction); restart the job, and look at the hardware only if it recurs on the"
        " same GPU."
    ),
    "xid-31": _(
        "A process touched an illegal GPU address, almost always an application or "
        "framework bug; restart the job and check its code if it recurs."
    ),
    "xid-43": _(
        "The driver aborted a channel after an error in the workload; the GPU itself is "
        "fine, restart the job."
    ),
    "xid-45": _(
        "The driver tore down a process's channels because it was stopped or an earlier "
        "error killed it; act on that earlier fault, not on this one."
    ),
    "xid-48": _(
        "GPU memory returned an uncorrectable error; the processes using it are lost and "
        "the GPU needs a reset before new work."
    ),
    "xid-63": _(
        "A failing memory row was recorded for remapping; running work is unaffected, but"
        " the GPU needs a reset, once idle, to apply it."
    ),
    "xid-64": _(
        "The GPU could not remap a failing memory row, so its memory can no longer "
        "protect itself; drain the node and send the GPU for repair."
    ),
    "xid-74": _(
        "An NVLink connection between GPUs failed, which breaks the job's collectives; "
        "reset the GPU, and repair the link if it recurs."
    ),
    "xid-79": _(
        "The GPU no longer answers on PCIe; everything on it is lost and only a reboot or"
        " power cycle brings it back."
    ),
    "xid-92": _(
        "Corrected memory errors are arriving faster than usual; nothing is lost yet, "
        "watch the trend and drain the node if it keeps rising."
    ),
    "xid-94": _(
        "An uncorrectable memory error was contained to the process using that memory: "
        "that process is lost, other work on the GPU goes on; reset the GPU when it is "
        "idle."
    ),
    "xid-95": _(
        "An uncorrectable memory error could not be contained: every process on the GPU "
        "is lost and the GPU must be reset before new work."
    ),
    "xid-119": _(
        "The GPU's system processor stopped answering the driver; the GPU is wedged and "
        "needs a reset (a reboot if the reset fails)."
    ),
    "xid-120": _(
        "The firmware on the GPU's system processor failed; the GPU needs a reset, and a "
        "driver or firmware update if it recurs."
    ),
    "ecc-dbe": _(
        "The ECC counters show new uncorrectable (double-bit) errors; work on the GPU is "
        "lost and the GPU needs a reset before new work."
    ),
    "ecc-sbe-storm": _(
        "Corrected errors have retired or remapped more memory than the site allows; "
        "running work may finish, then the node is drained for a memory test."
    ),
    "nvlink-down": _(
        "An NVLink between GPUs of the node is down, so the job's collectives on it fail;"
        " reset the GPUs, repair the link if it stays down."
    ),
    "nic-down": _(
        "A compute-network NIC of the node lost its link, so the job's cross-node traffic"
        " stops; drain the node and check the cable, port and NIC."
    ),
    "heartbeat-loss": _(
        "The node's agent stopped reporting: the node is down or cut off, its work is "
        "presumed lost and it is power-cycled through its management controller."
    ),
    "hang": _(
        "The job made no step progress for longer than its limit; abort and restart it, "
        "saving from memory first."
    ),
    "straggler": _(
        "One rank's steps take far longer than its peers', slowing the whole job; nothing"
        " is lost, but if it persists, replace the node."
    ),
    "drain": _(
        "An operator is draining the node: its jobs move to hot spares, saving first, or "
        "finish before the drain deadline; then the node goes down."
    ),
    "node-down": _(
        "An operator took the node down: its jobs are recovered elsewhere, the healthy "
        "ranks saving first where the job's policy does."
    ),
    "slow-node": _(
        "The node is persistently slower than its peers across jobs or checks; it "
        "finishes its work but takes no new work until it is investigated."
    ),
}


@register.filter
def word(value):
    return WORDS.get(str(value).lower(), value) if value is not None else value


@register.filter
def percent(share):
    return floatformat(share * 100, -1)


@register.filter
def fault_title(code):
    """The catalogue's title for a fault code, translated; the catalogue's own for a code this
    table does not know (an XID the catalogue does not know is "XID <n>" in every language)."""
    if code in TITLES:
        return TITLES[code]
    try:
        return faults.lookup(code).title
    except KeyError:
        return code


@register.filter
def fault_message(fault):
    """A fault's message, translated where it is the catalogue's own meaning of its kind."""
    kind = faults.CATALOGUE.get(fault.kind)
    if kind is not None and fault.message == kind.meaning:
        return MEANINGS[fault.kind]
    return fault.message
