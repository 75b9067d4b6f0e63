class Conflict(Exception):
    """The request is valid but the object's current state forbids it (HTTP 409)."""
