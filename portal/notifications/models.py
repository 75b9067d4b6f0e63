import secrets

from django.db import models

from portal.notifications.choices import DeliveryStatus
from portal.tenancy.models import Membership, Tenant


class Webhook(models.Model):
    """A URL of the tenant's that gets a signed POST for each event of its topics."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=500)
    topics = models.JSONField(default=list)
    # Kept, not hashed: every delivery is signed with it (HMAC-SHA256).
    secret = models.CharField(max_length=64, default=secrets.token_hex, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self):
        return self.url


class Delivery(models.Model):
    """One event for one webhook, tried until it lands or its attempts run out."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    topic = models.CharField(max_length=32)
    payload = models.JSONField()
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"

    def __str__(self):
        return f"{self.topic} to {self.webhook} ({self.status})"


class MailPreference(models.Model):
    """The topics a member wants by e-mail (job topics: of the jobs they submitted)."""

    membership = models.OneToOneField(
        Membership, on_delete=models.CASCADE, related_name="mail_preference"
    )
    topics = models.JSONField(default=list)

    def __str__(self):
        return f"{self.membership}: {', '.join(self.topics) or 'nothing'}"
