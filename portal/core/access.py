"""Who opens the operators' pages: signed-in staff. Anyone else signed in gets the portal's own
refusal, in their language (not Django's admin sign-in); someone not signed in signs in at the
portal's page first."""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext as _


def operator_page(view):
    @login_required
    @wraps(view)
    def checked(request, *args, **kwargs):
        if not request.user.is_staff:
            raise PermissionDenied(_("Only the platform's operators open this page."))
        return view(request, *args, **kwargs)

    return checked
