from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "portal.dashboard"
    label = "dashboard"

    def ready(self):
        from django.contrib.auth import get_user_model
        from django.contrib.auth.signals import user_logged_out
        from django.db.models.signals import post_delete, post_save

        from portal.dashboard.consumers import membership_changed, signed_out, user_saved
        from portal.tenancy.models import Membership

        # Open live sockets follow who their user is: the pages, the console and scripts alike.
        post_save.connect(user_saved, sender=get_user_model(), dispatch_uid="live-user")
        post_save.connect(membership_changed, sender=Membership, dispatch_uid="live-member")
        post_delete.connect(membership_changed, sender=Membership, dispatch_uid="live-member")
        user_logged_out.connect(signed_out, dispatch_uid="live-signed-out")
