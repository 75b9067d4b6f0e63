"""A tenant's people, managed by its admins: invite (a one-time link to choose a password,
shown to the admin and mailed to the invitee), change a role, remove. Every change is audited.
Operators keep full control in the operator console."""

import re

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from portal.core.models import audit
from portal.dashboard.views import _membership
from portal.tenancy.choices import Role
from portal.tenancy.models import Membership

USERNAME = re.compile(r"[\w.-]{1,150}")
INVITE_LINK = "wanka_invite_link"  # in the session between the invite and the page showing it
_LAST_ADMIN = gettext_lazy("%(user)s is the tenant's last admin: make another first.")


ROLE_IMPACTS = {
    Role.ADMIN: gettext_lazy("As a tenant admin they also request quota and manage members."),
    Role.MEMBER: gettext_lazy("As a member they submit and cancel jobs, but manage no one."),
    Role.VIEWER: gettext_lazy("As a viewer they only read: no submitting or cancelling."),
}


@login_required
def members(request):
    membership = _membership(request, "admin")
    if request.method == "POST":
        _invite(request, membership)
        return redirect("members")
    people = membership.tenant.memberships.select_related("user").order_by("user__username")
    return render(
        request,
        "dashboard/members.html",
        {
            "people": people,
            "roles": Role.choices,
            "role_impacts": [(role.value, role.label, ROLE_IMPACTS[role]) for role in Role],
            "invite_link": request.session.pop(INVITE_LINK, None),
        },
    )


def _invite(request, membership):
    username = request.POST.get("username", "").strip()
    email = request.POST.get("email", "").strip()
    role = request.POST.get("role", "")
    error = _refusal(username, email, role)
    if error:
        messages.error(request, error)
        return
    try:
        with transaction.atomic():
            user = get_user_model().objects.create_user(username, email)  # no password yet
            invited = Membership.objects.create(user=user, tenant=membership.tenant, role=role)
            audit("member.invited", invited, actor=request.user, tenant=membership.tenant,
                  username=username, role=role)  # fmt: skip
    except IntegrityError:
        messages.error(request, _("That username cannot be used: choose another."))
        return
    link = request.build_absolute_uri(
        reverse(
            "invite-accept",
            args=[
                urlsafe_base64_encode(force_bytes(user.pk)),
                default_token_generator.make_token(user),
            ],
        )
    )
    send_mail(
        f"You are invited to {membership.tenant} on Wanka",
        f"{request.user.get_username()} invited you to {membership.tenant} as "
        f"{Role(role).label.lower()}. Choose your password here (the link works once):\n\n{link}\n",
        None,
        [email],
    )
    request.session[INVITE_LINK] = link
    messages.success(
        request,
        _("Invited %(username)s; the link was mailed to %(email)s.")
        % {"username": username, "email": email},
    )


def _refusal(username: str, email: str, role: str) -> str | None:
    if not USERNAME.fullmatch(username):
        return _("A username is 1 to 150 letters, digits, dots, dashes or underscores.")
    try:
        validate_email(email)
    except ValidationError:
        return _("Give the invitee's e-mail address: the link goes there.")
    if role not in Role.values:
        return _("Choose a role from the list.")
    return None


@login_required
@require_POST
def member_role(request, pk):
    membership = _membership(request, "admin")
    person = get_object_or_404(membership.tenant.memberships, pk=pk)
    role = request.POST.get("role", "")
    if role not in Role.values:
        messages.error(request, _("Choose a role from the list."))
    elif _last_admin(person) and role != Role.ADMIN:
        messages.error(request, _LAST_ADMIN % {"user": person.user})
    elif role != person.role:
        with transaction.atomic():
            audit("member.role_changed", person, actor=request.user, tenant=membership.tenant,
                  username=person.user.get_username(), before=person.role, after=role)  # fmt: skip
            person.role = role
            person.save(update_fields=["role"])
        messages.success(
            request,
            _("%(user)s is now %(role)s.")
            % {"user": person.user, "role": person.get_role_display().lower()},
        )
    return redirect("members")


@login_required
@require_POST
def member_remove(request, pk):
    """The person leaves the tenant: their account is closed (sessions and tokens stop)."""
    membership = _membership(request, "admin")
    person = get_object_or_404(membership.tenant.memberships.select_related("user"), pk=pk)
    if _last_admin(person):
        messages.error(request, _LAST_ADMIN % {"user": person.user})
        return redirect("members")
    if person.user.is_staff:
        messages.error(
            request,
            _("%(user)s is also an operator: only operators remove them.") % {"user": person.user},
        )
        return redirect("members")
    with transaction.atomic():
        audit("member.removed", person, actor=request.user, tenant=membership.tenant,
              username=person.user.get_username(), role=person.role)  # fmt: skip
        user = person.user
        person.delete()
        user.api_tokens.all().delete()
        user.is_active = False
        user.save(update_fields=["is_active"])
    messages.success(request, _("%(user)s was removed.") % {"user": user})
    return redirect("members")


def _last_admin(person: Membership) -> bool:
    admins = person.tenant.memberships.filter(role=Role.ADMIN)
    return person.role == Role.ADMIN and admins.count() == 1
