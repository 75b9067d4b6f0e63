"""Wanka's sentences in the reader's language.

The engine, the autoscaler and the portal write their sentences in English from templates
(`scheduler.words.phrase`). `translate(text)` reads a sentence back into its template and fields
and writes the template's translation, each field translated in turn: a field may be a sentence
itself ("... to make room for workload 7: {cause}"), or a name or a figure, which stays as it
is. Text that is no known sentence (a person's own words, an agent's message) stays as it is.

A template's fields are found by trying each place its next literal text occurs, so a field may
hold the separators of the sentence inside it; of the readings, the first whose every field is
either a sentence or a single word (a name, a figure) is taken.
"""

import re
from functools import lru_cache
from itertools import islice

from django.utils.translation import get_language, gettext

from scheduler.words import PHRASES

FIELD = re.compile(r"\{(\w+)\}")
READINGS = 64  # readings of one template tried on one text, at most


def translate(text: str) -> str:
    """`text` in the active language, where it is one of Wanka's sentences."""
    language = get_language() or "en"
    if not text or language.startswith("en"):
        return text
    return _translate(str(text), language)


@lru_cache(maxsize=8192)
def _translate(text: str, language: str) -> str:
    found = _read(text)
    if found is None:
        return text
    template, fields = found
    return gettext(template).format(**{k: _translate(v, language) for k, v in fields.items()})


def _read(text: str) -> tuple[str, dict[str, str]] | None:
    """The template and fields of `text`: the first template that reads it well, else the
    first that reads it at all."""
    first = None
    for template, parts in _templates():
        for fields in _readings(parts, text):
            if all(_word_or_sentence(v) for v in fields.values()):
                return template, fields
            first = first or (template, fields)
    return first


def _word_or_sentence(value: str) -> bool:
    return " " not in value.strip() or _read_whole(value)


@lru_cache(maxsize=8192)
def _read_whole(value: str) -> bool:
    return _read(value) is not None


@lru_cache(maxsize=1)
def _templates() -> list[tuple[str, list[str]]]:
    """Every registered template as [literal, field, literal, ..., literal], the ones with the
    most literal text first (they say the most)."""
    _register()
    templates = [(t, FIELD.split(t)) for t in dict.fromkeys(PHRASES)]
    return sorted(templates, key=lambda tp: -sum(len(p) for p in tp[1][::2]))


def _register() -> None:
    """Import the modules whose sentences are not imported by the time a page is drawn."""
    import portal.workloads.reasons  # noqa: F401
    import scheduler.autoscale  # noqa: F401
    import scheduler.engine.explain  # noqa: F401


def _readings(parts: list[str], text: str):
    """Each way `text` reads as the template's `parts` (literal, field, literal, ...): dicts of
    field -> value, at most READINGS of them."""
    if text.startswith(parts[0]):
        yield from islice(_fill(parts, 1, text, len(parts[0]), {}), READINGS)


def _fill(parts, i, text, at, fields):
    if i == len(parts):
        if at == len(text):
            yield dict(fields)
        return
    name, literal, last = parts[i], parts[i + 1], i + 2 == len(parts)
    ends = [len(text) - len(literal)] if last else _occurrences(text, literal, at)
    for end in ends:
        if end < at or (last and not text.endswith(literal)):
            continue
        value = text[at:end]
        if fields.get(name, value) != value:  # a field named twice holds one value
            continue
        yield from _fill(parts, i + 2, text, end + len(literal), {**fields, name: value})


def _occurrences(text: str, literal: str, at: int):
    if not literal:  # two fields side by side: any split
        yield from range(at, len(text) + 1)
        return
    end = text.find(literal, at)
    while end != -1:
        yield end
        end = text.find(literal, end + 1)
