"""`{{ text|readable:request }}`: a reason as the page's viewer may read it."""

from django import template

from portal.workloads.reasons import Reader

register = template.Library()


@register.filter
def readable(text, request):
    return Reader.for_request(request).read(text)
