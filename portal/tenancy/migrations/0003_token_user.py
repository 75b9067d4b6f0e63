import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def owners(apps, schema_editor):
    ApiToken = apps.get_model("tenancy", "ApiToken")
    for token in ApiToken.objects.select_related("membership"):
        token.user_id = token.membership.user_id
        token.save(update_fields=["user"])


class Migration(migrations.Migration):
    """Tokens belong to users, so operators (in no tenant) hold them too."""

    dependencies = [
        ("tenancy", "0002_token_scope_and_expiry"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="user",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="api_tokens",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(owners, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="apitoken",
            name="user",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="api_tokens",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RemoveField(model_name="apitoken", name="membership"),
    ]
