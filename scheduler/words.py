"""The sentences Wanka says about its decisions, as templates: written in English (the API's
language) and rendered in the reader's language by the portal.

Every sentence is made by `phrase("... {field} ...")` once, at import, and written with
`str.format`. A field may hold another sentence: "shrunk from 64 to 48 GPUs ... to make room for
workload 7: {cause}" holds the reclaim rule's own sentence. The portal reads a sentence back into
its template and fields (`portal.workloads.phrasebook`) and renders the template's translation with
each field translated in turn; fields that are no sentence (names, numbers) stay as they are.
`makemessages` extracts every `phrase(...)` (`portal/core/management/commands/makemessages.py`).
"""

PHRASES: list[str] = []


def phrase(template: str) -> str:
    """`template`, registered as a sentence the portal can translate."""
    PHRASES.append(template)
    return template


# Two sentences, the second following from the first.
AND_SO = phrase("{reason}; {then}")

# Durations, shared by every sentence that says one.
SECONDS, MINUTES, HOURS = phrase("{n} s"), phrase("{n} min"), phrase("{hours} h")


def amount(gpus: float) -> str:
    """GPUs (or their work) to three decimals, without trailing zeros: 7, 0.875 (eighths are
    exact), 0.429 (three sevenths of a GPU, not 0.42857142857142855), 12.5."""
    return f"{gpus:.3f}".rstrip("0").rstrip(".")
