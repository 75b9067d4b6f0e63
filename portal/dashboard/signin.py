"""Sign-in that resists password guessing: after `FAILURES` wrong passwords for one username
within `WINDOW_S` seconds, that username cannot sign in until the window has passed, whatever
password it gives. Counted in Redis (`core.throttles`), so every web process sees the same
count, and counted alike on the members' sign-in page and the operator console's; when Redis
cannot answer, sign-in works uncounted rather than fail."""

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy, ngettext

from portal.core import throttles

FAILURES = 10
WINDOW_S = 15 * 60


def _key(username: str) -> str:
    return f"signin:{username.strip().lower()}"


class Throttled:
    """The count of a sign-in form's failures (put before the form's class)."""

    def clean(self):
        key = _key(self.cleaned_data.get("username") or "")
        if wait := throttles.over(key, FAILURES):
            minutes = max(1, -(-int(wait) // 60))
            raise ValidationError(
                ngettext(
                    "Too many failed sign-ins for this username; try again in %(minutes)d minute.",
                    "Too many failed sign-ins for this username; try again in %(minutes)d minutes.",
                    minutes,
                )
                % {"minutes": minutes},
                code="throttled",
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            throttles.hit(key, FAILURES, WINDOW_S)
            raise
        throttles.forget(key)
        return cleaned


class SignInForm(Throttled, AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": gettext_lazy("Wrong username or password."),
    }


class AdminSignInForm(Throttled, AdminAuthenticationForm):
    """The operator console's sign-in (staff only), throttled as the members' is."""
