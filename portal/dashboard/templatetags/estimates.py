"""`{% no_estimate %}`: what a pending workload without an estimated start is told, with how
far ahead the last refresh of the estimates looked (read once a request)."""

from django import template
from django.utils import timezone
from django.utils.timesince import timeuntil
from django.utils.translation import gettext as _

from portal.workloads import eta

register = template.Library()
UNREAD = object()


@register.simple_tag(takes_context=True)
def no_estimate(context, workload=None) -> str:
    """Why there is no estimate; for `workload`, "Estimating…" until a refresh has seen it."""
    request = context.get("request")
    seen = getattr(request, "eta_seen", UNREAD)
    if seen is UNREAD:
        seen = eta.last_refresh()
        if request is not None:
            request.eta_seen = seen
    if seen is not None and workload is not None and workload.submitted_at > seen[0]:
        return _("Estimating…")
    until = seen and seen[1]
    if until is None or until <= timezone.now():
        return _("no estimate yet")
    return _("no estimate: not within %(ahead)s, or behind the first %(cap)s of its queue") % {
        "ahead": timeuntil(until, depth=1),
        "cap": eta.BOUNDS.per_queue,
    }
