from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    ADMIN = "admin", _("Tenant admin")
    MEMBER = "member", _("Member")
    VIEWER = "viewer", _("Viewer")
