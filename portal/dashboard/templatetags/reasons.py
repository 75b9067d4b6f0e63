"""`{{ text|readable:request }}`: one of Wanka's sentences in the page's language, as the
page's viewer may read it."""

from django import template

from portal.workloads.phrasebook import translate
from portal.workloads.reasons import Reader

register = template.Library()


@register.filter
def readable(text, request):
    return translate(text, Reader.for_request(request))
