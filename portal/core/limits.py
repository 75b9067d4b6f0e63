"""Bounds on what one API request may ask for: how deep its JSON nests, how large a page it
reads and how far it skips. Beyond them a request gets a 400 naming why, never a 500.

These load while DRF reads its settings, so they import nothing that imports DRF's views.
"""

from rest_framework import pagination, parsers
from rest_framework.exceptions import ParseError, ValidationError


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, refusing a body nested deeper than `max_depth` with a 400 (Python's
    decoder, and everything that walks the data after it, would raise a RecursionError)."""

    max_depth = 32

    def parse(self, stream, media_type=None, parser_context=None):
        too_deep = ParseError(f"JSON parse error - nested more than {self.max_depth} deep.")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise too_deep from None
        level = [data]
        for _ in range(self.max_depth):
            level = [
                child
                for item in level
                if isinstance(item, dict | list)
                for child in (item.values() if isinstance(item, dict) else item)
            ]
            if not level:
                return data
        if any(isinstance(item, dict | list) and item for item in level):
            raise too_deep
        return data


class Pagination(pagination.LimitOffsetPagination):
    """Pages of at most `max_limit`; an offset beyond `max_offset` is a 400, not a database
    error."""

    max_limit = 500
    max_offset = 1_000_000_000

    def get_offset(self, request):
        offset = super().get_offset(request)
        if offset > self.max_offset:
            raise ValidationError(
                {"offset": f"Ensure this value is less than or equal to {self.max_offset}."}
            )
        return offset
