from portal.tenancy.models import ALLOWED, membership_of


def membership(request):
    """The signed-in user's tenant membership (or None) and what their role may do, for every
    template: `{% if may.write %}`."""
    membership = membership_of(getattr(request, "user", None))
    return {
        "membership": membership,
        "may": {action: bool(membership and membership.may(action)) for action in ALLOWED},
    }
