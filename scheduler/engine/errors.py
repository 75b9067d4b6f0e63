"""The one way a step of the cycle says "not now"."""


class Inadmissible(Exception):
    """A workload cannot be admitted this cycle; the message is the reason a person reads."""
