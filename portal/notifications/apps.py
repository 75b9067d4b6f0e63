from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    """What a tenant hears of outside the browser: webhooks and e-mail."""

    name = "portal.notifications"
    label = "notifications"

    def ready(self):
        from portal.core.live import tenant_event
        from portal.notifications import events

        tenant_event.connect(events.gather, dispatch_uid="notifications")
