"""Long operator lists in pages (`dashboard/_pages.html` draws the links)."""

from django.core.paginator import Paginator

PAGE_ROWS = 50


def paged(request, rows):
    """The page of `rows` (a queryset or a list) the request asks for, and its query without
    the page, for the links to the others."""
    query = request.GET.copy()
    query.pop("page", None)
    return Paginator(rows, PAGE_ROWS).get_page(request.GET.get("page")), query.urlencode()
