"""How lists sort (apart from `portal.core.api`: DRF imports this module while loading its
settings)."""

from django.db.models import F
from rest_framework import filters


def stable(*fields: str) -> list:
    """`order_by` terms for `fields` ("name" or "-name") that put rows without a value last on
    every database (PostgreSQL puts NULL first when descending, SQLite when ascending), then the
    newest id first, so that rows that tie (jobs with no estimated start, or the same GPUs)
    keep one order from request to request: pages neither repeat nor skip them and a live list
    does not reshuffle."""
    terms = [
        F(f[1:]).desc(nulls_last=True) if f.startswith("-") else F(f).asc(nulls_last=True)
        for f in fields
    ]
    return [*terms, "-id"]


class StableOrdering(filters.OrderingFilter):
    """DRF's `ordering`, sorted as `stable` says."""

    def filter_queryset(self, request, queryset, view):
        ordering = self.get_ordering(request, queryset, view)
        return queryset.order_by(*stable(*ordering)) if ordering else queryset
