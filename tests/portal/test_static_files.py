"""Static files once collected, as production and the standalone portal serve them: hashed
names, compressed, cached for good (Plotly's bundle is 4.8 MB raw)."""

from django.contrib.staticfiles.storage import staticfiles_storage
from django.core.management import call_command
from django.test import Client


def test_collected_files_are_served_compressed_and_cached_for_good(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    settings.WHITENOISE_USE_FINDERS = False
    call_command("collectstatic", "--noinput", verbosity=0)
    url = staticfiles_storage.url("plotly/plotly.min.js")
    assert url.startswith("/static/plotly/plotly.min.") and url != "/static/plotly/plotly.min.js"
    answer = Client().get(url, HTTP_ACCEPT_ENCODING="gzip")
    assert answer.status_code == 200
    assert answer["Content-Encoding"] == "gzip"
    assert int(answer["Content-Length"]) < 1_600_000  # of 4.8 MB
    assert "immutable" in answer["Cache-Control"] and "max-age=315360000" in answer["Cache-Control"]
