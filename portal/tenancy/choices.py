from django.db import models


class Role(models.TextChoices):
    ADMIN = "admin", "Tenant admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"
