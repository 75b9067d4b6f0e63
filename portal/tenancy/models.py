import hashlib
import secrets

from django.conf import settings
from django.db import models

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

    @property
    def can_write(self) -> bool:
        return self.role != Role.VIEWER

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for the REST API, acting as one member; only its hash is stored."""

    PREFIX = "wk_"

    membership = models.ForeignKey(Membership, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100)
    key_hash = models.CharField(max_length=64, unique=True)
    hint = models.CharField(max_length=8, help_text="Last characters, to tell tokens apart")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    def __str__(self):
        return f"{self.name} (…{self.hint})"

    @classmethod
    def issue(cls, membership: Membership, name: str) -> tuple["ApiToken", str]:
        """Create a token and return it with the raw key, which is shown once and never again."""
        raw = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            membership=membership, name=name, key_hash=hash_token(raw), hint=raw[-4:]
        )
        return token, raw
