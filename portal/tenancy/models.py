import hashlib
import secrets

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.tenancy.choices import Role


class Tenant(models.Model):
    """A customer organisation: owns queues, workloads and GPU-hours."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Membership(models.Model):
    """A user's place in one tenant and the role they hold there."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    def __str__(self):
        return f"{self.user} @ {self.tenant} ({self.role})"

    def may(self, action: str) -> bool:
        """Whether the member's role allows `action`: "read", "write" or "admin"."""
        return self.role in ALLOWED[action]


# What each role may do: the one role predicate, read by the API, the pages and the templates.
ALLOWED = {
    "read": {Role.ADMIN, Role.MEMBER, Role.VIEWER},
    "write": {Role.ADMIN, Role.MEMBER},
    "admin": {Role.ADMIN},
}


def membership_allowing(user, needs: str = "read") -> Membership:
    """The user's membership when their role allows `needs`; else PermissionDenied (a 403
    page that says why). What the pages check; the API has `core.api.TenantPermission`."""
    membership = membership_of(user)
    if membership is None or not membership.may(needs):
        raise PermissionDenied(_("Your role does not allow this."))
    return membership


def membership_of(user) -> Membership | None:
    """The user's tenant membership; None when signed out or in no tenant (operators)."""
    if user is None or not user.is_authenticated:
        return None
    return getattr(user, "membership", None)


class TenantQuerySet(models.QuerySet):
    """Rows that belong to a tenant. `visible_to` is the one rule for who sees them: a member
    sees their tenant's, an operator (staff in no tenant) every tenant's, anyone else none.
    The API, the pages, the ETTR views and the live updates all cut through it."""

    def visible_to(self, user) -> models.QuerySet:
        membership = membership_of(user)
        if membership is not None:
            return self.of_tenant(membership.tenant_id)
        return self if user is not None and user.is_staff else self.none()

    def of_tenant(self, tenant_id: int) -> models.QuerySet:
        return self.filter(tenant_id=tenant_id)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for the REST API, acting as its user (a tenant's member, or an operator)
    within its scope (a read token only reads, whatever the role) until it expires; only its
    hash is stored."""

    PREFIX = "wk_"
    SCOPES = {"read": _("Read only"), "write": _("Read and write")}

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=8, help_text="Last characters, to tell tokens apart")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    scope = models.CharField(max_length=8, choices=list(SCOPES.items()), default="write")
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never")

    class Meta:
        verbose_name, verbose_name_plural = _("API token"), _("API tokens")

    def __str__(self):
        return f"{self.name} (…{self.hint})"

    @classmethod
    def issue(
        cls, user, name: str, scope: str = "write", expires_at=None
    ) -> tuple["ApiToken", str]:
        """Create a token and return it with the raw key, which is shown once and never again."""
        raw = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user,
            name=name,
            key_hash=hash_token(raw),
            hint=raw[-4:],
            scope=scope,
            expires_at=expires_at,
        )
        return token, raw

    def expired(self, now) -> bool:
        return self.expires_at is not None and self.expires_at <= now
