"""Reasons as a tenant may read them.

The engine names every queue `tenant/queue` and every workload by its id, so an operator reads
exactly who took what from whom. A tenant reads its own queues by their names and its own
workloads by their ids; another tenant's queue is only "another tenant's queue", without the
figures that follow it (its quota use), and another tenant's workload only "a workload of
another tenant"; how many workloads a claim preempts, shrinks or waits for is left out (they
may be other tenants'), its own queues' counts kept: tenants never see each other's names or
numbers.
"""

import re

from django.apps import apps

# A queue, and the clause about it up to the next comma, semicolon or bracket, with one
# bracketed figure after it: "queue acme/llm is under its H800 nominal quota (0/32 in use)".
QUEUE = re.compile(r"queue ([a-z0-9][a-z0-9_-]*)/([\w.-]+)([^,;()]*(?:\([^)]*\))?)")
WORKLOADS = re.compile(r"\b(workloads?) (\d+(?:, \d+)*)")
# The queues a claim preempts from, with how many of each: "(queue acme/llm: 1, globex/a: 2)".
PREEMPTED = re.compile(
    r"\(queue ([a-z0-9][a-z0-9_-]*/[\w.-]+: \d+(?:, [a-z0-9][a-z0-9_-]*/[\w.-]+: \d+)*)\)"
)
# How many workloads a claim moves: "preempting 3 workloads", "waiting for 1 preempted workload".
COUNTED = re.compile(
    r"\b(preempting|waiting for|shrinking) \d+ ((?:preempted |elastic )?workload)s?\b"
)


class Reader:
    """Reads reasons for one viewer; `tenant` None for an operator, who reads them whole."""

    def __init__(self, tenant):
        self.tenant = tenant
        self._own: dict[int, bool] = {}

    @classmethod
    def for_request(cls, request) -> "Reader":
        """The reader of the request's user, made once per request."""
        reader = getattr(request, "_wanka_reader", None)
        if reader is None:
            user = request.user
            membership = None if user.is_staff else getattr(user, "membership", None)
            reader = cls(membership.tenant if membership else None)
            request._wanka_reader = reader
        return reader

    def read(self, text: str) -> str:
        if self.tenant is None or not text:
            return text
        text = COUNTED.sub(r"\1 \2s", text)
        text = PREEMPTED.sub(self._preempted, text)
        text = QUEUE.sub(self._queue, text)
        ids = [int(i) for m in WORKLOADS.finditer(text) for i in m.group(2).split(", ")]
        self._learn(ids)
        return WORKLOADS.sub(self._workloads, text)

    def _queue(self, match: re.Match) -> str:
        slug, name, clause = match.groups()
        if slug == self.tenant.slug:
            return f"queue {name}{clause}"
        return "another tenant's queue"

    def _preempted(self, match: re.Match) -> str:
        """Own queues by name with their counts; the others neither named nor counted."""
        own, others = [], False
        for item in match.group(1).split(", "):
            queue, count = item.rsplit(": ", 1)
            slug, name = queue.split("/", 1)
            if slug == self.tenant.slug:
                own.append(f"{name}: {count}")
            else:
                others = True
        parts = ["queue " + ", ".join(own)] if own else []
        if others:
            parts.append("another tenant's queue")
        return f"({', '.join(parts)})"

    def mine(self, ids: list[int]) -> list[int]:
        """The ids of `ids` that are the reader's own workloads."""
        if self.tenant is None:
            return ids
        self._learn(ids)
        return [i for i in ids if self._own.get(i)]

    def _learn(self, ids: list[int]) -> None:
        unknown = {i for i in ids if i not in self._own}
        if unknown:
            workloads = apps.get_model("workloads", "Workload")  # models use this module
            mine = set(
                workloads.objects.filter(tenant=self.tenant, pk__in=unknown).values_list(
                    "pk", flat=True
                )
            )
            self._own.update({i: i in mine for i in unknown})

    def _workloads(self, match: re.Match) -> str:
        ids = [int(i) for i in match.group(2).split(", ")]
        mine = [str(i) for i in ids if self._own.get(i)]
        if len(mine) == len(ids):
            return match.group(0)
        if not mine:
            return "a workload of another tenant" if len(ids) == 1 else "other tenants' workloads"
        return f"workloads {', '.join(mine)} and other tenants'"


def readable(text: str, workload) -> str:
    """`text` as the members of the workload's tenant may read it (its tenant is fetched only
    when the text names a queue or a workload)."""
    # (A list of PREEMPTED queues holds a QUEUE match too.)
    if not text or not (QUEUE.search(text) or WORKLOADS.search(text) or COUNTED.search(text)):
        return text
    return Reader(workload.tenant).read(text)
