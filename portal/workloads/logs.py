"""Workloads' output: what agents ship (`record_many`), what readers get (`read`, `follow`),
and what is kept (`trim`: by age, and by size per workload, oldest first)."""

import time
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from portal.workloads.models import LogChunk, Workload
from scheduler.agent.protocol import printable

# The most chunks one read returns; a reader pages on with the last id it got.
READ_LIMIT = 500
# How long a follow waits for new output before it answers with none.
FOLLOW_S = 15.0
FOLLOW_POLL_S = 0.5
# Readers see chunks this much after they were written: chunks of several ASGI processes can
# commit out of the order of their ids, and a cursor must never pass one still to commit.
SETTLE_S = 1.0
TRIM_BATCH = 10_000


def record_many(batches: list[tuple[int, int, int, int, list[str]]]) -> list[None]:
    """(node, workload, attempt, offset, lines) batches from agents, written in one insert. A
    batch sent twice (resent after a reconnect) is kept once; one about a workload that is
    gone is dropped."""
    known = set(
        Workload.objects.filter(pk__in={b[1] for b in batches}).values_list("pk", flat=True)
    )
    chunks = []
    for node_id, workload_id, attempt, offset, lines in batches:
        if workload_id in known and lines:
            text = "\n".join(map(printable, lines))  # an agent's word is checked here too
            chunks.append(
                LogChunk(
                    workload_id=workload_id,
                    attempt=attempt,
                    node_id=node_id,
                    offset=offset,
                    text=text,
                    lines=len(lines),
                    size=len(text),
                )
            )
    LogChunk.objects.bulk_create(chunks, ignore_conflicts=True)
    return [None] * len(batches)


def read(workload: Workload, attempt=None, node=None, since=0, limit=READ_LIMIT) -> list[LogChunk]:
    """The workload's chunks after id `since`, oldest first, of one attempt and one node (by
    name) when given."""
    settled = timezone.now() - timedelta(seconds=SETTLE_S)
    chunks = workload.log_chunks.filter(id__gt=since, at__lt=settled).select_related("node")
    if attempt is not None:
        chunks = chunks.filter(attempt=attempt)
    if node is not None:
        chunks = chunks.filter(node__name=node)
    return list(chunks.order_by("id")[:limit])


def follow(workload: Workload, wait_s: float = FOLLOW_S, **query) -> list[LogChunk]:
    """`read`, but while the workload may still write and nothing is new, wait up to `wait_s`
    for something to be (what `tail -f` does, a request at a time)."""
    deadline = time.monotonic() + wait_s
    while True:
        chunks = read(workload, **query)
        if chunks or time.monotonic() >= deadline or not writing(workload):
            return chunks
        connection.close()  # back to the pool while this request waits
        time.sleep(FOLLOW_POLL_S)


def writing(workload: Workload) -> bool:
    """Whether more output may come: the workload has not finished, or finished a moment ago
    (its agent's last batch may be on its way)."""
    workload.refresh_from_db(fields=["state", "finished_at"])
    if workload.finished_at is None:
        return True
    return timezone.now() - workload.finished_at < timedelta(seconds=5)


def runs(workload: Workload) -> list[dict]:
    """The (attempt, node) pairs that wrote output, with their line counts, newest first."""
    rows = workload.log_chunks.values("attempt", "node__name").annotate(lines=Sum("lines"))
    return [
        {"attempt": row["attempt"], "node": row["node__name"], "lines": row["lines"]}
        for row in rows.order_by("-attempt", "node__name")
    ]


def trim() -> int:
    """Drop output older than LOG_RETENTION_DAYS, and the oldest output of any workload over
    LOG_CHARS_PER_WORKLOAD; returns the number of chunks dropped. Deletes go in batches, so
    none holds the table long."""
    cutoff = timezone.now() - timedelta(days=settings.WANKA["LOG_RETENTION_DAYS"])
    dropped = 0
    while old := list(
        LogChunk.objects.filter(at__lt=cutoff).values_list("pk", flat=True)[:TRIM_BATCH]
    ):
        dropped += LogChunk.objects.filter(pk__in=old).delete()[0]
    limit = settings.WANKA["LOG_CHARS_PER_WORKLOAD"]
    over = LogChunk.objects.values("workload").annotate(total=Sum("size")).filter(total__gt=limit)
    for row in over:
        excess, freed, last = row["total"] - limit, 0, None
        oldest = LogChunk.objects.filter(workload_id=row["workload"]).order_by("id")
        for pk, size in oldest.values_list("pk", "size").iterator(chunk_size=2000):
            if freed >= excess:
                break
            last, freed = pk, freed + size
        if last is not None:
            gone = LogChunk.objects.filter(workload_id=row["workload"], id__lte=last)
            dropped += gone.delete()[0]
    return dropped
