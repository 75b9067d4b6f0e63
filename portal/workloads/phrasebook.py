"""Wanka's sentences in the reader's language.

The engine, the autoscaler and the portal write their sentences in English from templates
(`scheduler.words.phrase`). `translate(text, reader)` reads a sentence back into its template
and fields and writes the template's translation, each field translated in turn: a field may be
a sentence itself ("... to make room for workload 7: {cause}"), or a name or a figure, which
stays as it is. Text that is no known sentence (a person's own words, an agent's message) stays
as it is.

A tenant reads other tenants' work as `reasons.Reader` says, here field by field: a sentence
about another tenant's queue is only "another tenant's queue" (its figures dropped), another
tenant's workload ids are not given, and neither are the counts of workloads a claim moves.
Text no template reads is left to the Reader whole.

A template's fields are found by trying each place its next literal text occurs, so a field may
hold the separators of the sentence inside it; of the readings, the first whose every field is
either a sentence or a single word (a name, a figure) is taken.
"""

import re
from functools import lru_cache
from itertools import islice

from django.utils.translation import get_language, gettext, pgettext

from scheduler import faults
from scheduler.words import PHRASES, phrase

FIELD = re.compile(r"\{(\w+)\}")
READINGS = 64  # readings of one template tried on one text, at most
COUNT = re.compile(r"^\d+ ")
# Fields that hold names (of queues, models, nodes, fault codes), never read as sentences.
NAMES = {"queue", "queues", "cohort", "model", "gpu", "node", "code", "policy", "region"}
OTHER_QUEUE = phrase("another tenant's queue")
BARE = {  # what a claim moves, its count left out
    "workload": phrase("workloads"),
    "elastic workload": phrase("elastic workloads"),
    "preempted workload": phrase("preempted workloads"),
}


def translate(text: str, reader=None) -> str:
    """`text` in the active language, as `reader` (a `reasons.Reader`, None for all) may read
    it."""
    if not text:
        return text
    text = str(text)
    language = get_language() or "en"
    if language.startswith("en"):
        return reader.read(text) if reader is not None else text
    if reader is None or reader.tenant is None:
        return _translated(text, language)
    return _render(text, reader)


@lru_cache(maxsize=8192)
def _translated(text: str, language: str) -> str:
    return _render(text, None)


def _render(text: str, reader) -> str:
    found = _read(text)
    if found is None:
        return reader.read(text) if reader is not None else text
    template, fields = found[0], dict(found[1])
    if reader is not None and "queue" in fields and "queue {queue}" in template:
        slug, _, name = fields["queue"].partition("/")
        if name and slug != reader.tenant.slug:
            return gettext(OTHER_QUEUE)
        fields["queue"] = name or fields["queue"]
    return gettext(template).format(**{k: _field(k, v, reader) for k, v in fields.items()})


def _field(name: str, value: str, reader) -> str:
    if reader is not None:
        if name in ("workload", "owners"):
            return _hidden_workloads(value, reader)
        if name == "queues":
            return _hidden_queues(value, reader)
        if name == "workloads":
            noun = COUNT.sub("", value).removesuffix("s")
            return gettext(BARE[noun]) if noun in BARE else reader.read(value)
    if name in NAMES:
        return value
    return _render(value, reader)


def _hidden_workloads(value: str, reader) -> str:
    """Workload ids, the reader's own only."""
    try:
        ids = [int(i) for i in value.split(", ")]
    except ValueError:
        return reader.read(value)
    mine = reader.mine(ids)
    shown = ", ".join(str(i) for i in mine)
    if len(mine) == len(ids):
        return shown
    hidden = pgettext("workload ids", "(another tenant's)")
    return f"{shown} {hidden}" if mine else hidden


def _hidden_queues(value: str, reader) -> str:
    """`tenant/queue: count, ...`: the reader's own queues with their counts, the others
    neither named nor counted."""
    own, others = [], False
    for item in value.split(", "):
        queue, _, count = item.rpartition(": ")
        slug, _, name = queue.partition("/")
        if slug == reader.tenant.slug:
            own.append(f"{name}: {count}")
        else:
            others = True
    return ", ".join(own + ([gettext(OTHER_QUEUE)] if others else []))


@lru_cache(maxsize=8192)
def _read(text: str) -> tuple[str, dict[str, str]] | None:
    """The template and fields of `text`: the first template that reads it well, else the
    first that reads it at all."""
    first = None
    for template, parts in _candidates(text):
        for fields in _readings(parts, text):
            if all(_word_or_sentence(v) for v in fields.values()):
                return template, fields
            first = first or (template, fields)
    return first


def _word_or_sentence(value: str) -> bool:
    return " " not in value.strip() or _read(value) is not None


def _candidates(text: str) -> list[tuple[str, list[str]]]:
    """The templates that could read `text`, in `_templates` order: those whose opening (or,
    opening with a field, closing) words are the text's, and the few that are fields at both
    ends."""
    rank, by_start, by_end, anywhere = _index()
    found = anywhere[:]
    for size in range(1, KEY + 1):
        found += by_start.get(text[:size], []) + by_end.get(text[-size:], [])
    return sorted(found, key=lambda tp: rank[tp[0]])


KEY = 3  # characters of a template's opening or closing text it is indexed by


@lru_cache(maxsize=1)
def _index():
    templates = _templates()
    rank = {template: i for i, (template, _) in enumerate(templates)}
    by_start, by_end, anywhere = {}, {}, []
    for template, parts in templates:
        if parts[0]:
            by_start.setdefault(parts[0][:KEY], []).append((template, parts))
        elif parts[-1]:
            by_end.setdefault(parts[-1][-KEY:], []).append((template, parts))
        else:
            anywhere.append((template, parts))
    return rank, by_start, by_end, anywhere


@lru_cache(maxsize=1)
def _templates() -> list[tuple[str, list[str]]]:
    """Every registered template as [literal, field, literal, ..., literal], the ones with the
    most literal text first (they say the most)."""
    _register()
    templates = [(t, FIELD.split(t)) for t in dict.fromkeys(PHRASES)]
    return sorted(templates, key=lambda tp: -sum(len(p) for p in tp[1][::2]))


def _register() -> None:
    """Import the modules whose sentences may not be imported yet when a page is drawn, and
    take the fault catalogue's titles (translated by `dashboard.templatetags.words`)."""
    import portal.cluster.checks  # noqa: F401
    import portal.cluster.faults  # noqa: F401
    import portal.cluster.streaks  # noqa: F401
    import portal.workloads.budgets  # noqa: F401
    import portal.workloads.words  # noqa: F401
    import scheduler.autoscale  # noqa: F401
    import scheduler.checkpointing  # noqa: F401
    import scheduler.engine.cycle  # noqa: F401
    import scheduler.sim.runner  # noqa: F401

    PHRASES.extend(kind.title for kind in faults.CATALOGUE.values())


def _readings(parts: list[str], text: str):
    """Each way `text` reads as the template's `parts` (literal, field, literal, ...): dicts of
    field -> value, at most READINGS of them."""
    if (
        text.startswith(parts[0])
        and text.endswith(parts[-1])
        and all(literal in text for literal in parts[2:-1:2])
    ):
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
