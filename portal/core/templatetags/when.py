"""`{{ moment|when }}`: a time as a <time> element, in UTC on the server and turned into the
reader's own time zone by static/js/time.js, so a page never mixes the two (charts are local)."""

from datetime import UTC

from django import template
from django.utils.html import format_html

register = template.Library()

FORMATS = {"m": "%Y-%m-%d %H:%M", "s": "%Y-%m-%d %H:%M:%S", "t": "%H:%M:%S"}


@register.filter
def when(moment, precision: str = "m"):
    """`precision`: "m" (to the minute), "s" (to the second) or "t" (the time of day)."""
    if not moment:
        return ""
    utc = moment.astimezone(UTC)
    return format_html(
        '<time datetime="{}" data-local="{}">{} UTC</time>',
        utc.isoformat(),
        precision,
        utc.strftime(FORMATS[precision]),
    )
