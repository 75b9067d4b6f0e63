def membership(request):
    """The signed-in user's tenant membership, or None, for every template."""
    user = getattr(request, "user", None)
    return {
        "membership": getattr(user, "membership", None) if user and user.is_authenticated else None
    }
