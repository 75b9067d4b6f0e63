"""The one way a step of the cycle says "not now"."""

from collections.abc import Callable


class Inadmissible(Exception):
    """A workload cannot be admitted this cycle; the message is the reason a person reads."""


def refusal(check: Callable[..., object], *args: object) -> str | None:
    """Why `check(*args)` says "not now" (the reason of the Inadmissible it raises), or None
    when it passes."""
    try:
        check(*args)
    except Inadmissible as why:
        return str(why)
    return None
