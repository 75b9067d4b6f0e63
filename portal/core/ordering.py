"""The REST API's sort (apart from `portal.core.api`: DRF imports it while loading its settings)."""

from rest_framework import filters


class StableOrdering(filters.OrderingFilter):
    """DRF's `ordering`, then the id: rows that tie (jobs with no estimated start, or the same
    GPUs) keep one order from request to request, so pages neither repeat nor skip them and a
    live list does not reshuffle."""

    def get_ordering(self, request, queryset, view):
        ordering = super().get_ordering(request, queryset, view)
        return [*ordering, "-id"] if ordering else ordering
