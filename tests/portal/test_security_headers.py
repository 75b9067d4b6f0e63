"""Every response runs only the portal's own scripts (the what-if report runs sandboxed, see
test_whatif); with WANKA_HTTPS the cookies are TLS-only and browsers told to stay on HTTPS."""

import os
import subprocess
import sys

from portal.core.security import POLICY


def test_pages_and_the_api_carry_the_policy(client, alice):
    client.force_login(alice)
    for url in ["/login/", "/", "/api/v1/queues/", "/api/docs/"]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert response.headers["Content-Security-Policy"] == POLICY, url
    assert "script-src 'self';" in POLICY and "'unsafe-inline'" not in POLICY.split(";")[1]


def _settings(**env) -> dict:
    """Settings as a fresh process reads them from the environment."""
    code = (
        "import django, json; from django.conf import settings; django.setup(); "
        "print(json.dumps({k: getattr(settings, k) for k in ['SESSION_COOKIE_SECURE', "
        "'CSRF_COOKIE_SECURE', 'SECURE_SSL_REDIRECT', 'SECURE_HSTS_SECONDS']}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    import json

    return json.loads(out.stdout)


def test_https_settings_make_cookies_tls_only_and_turn_hsts_on():
    assert _settings(WANKA_HTTPS="1") == {
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
    }
    assert _settings(WANKA_HTTPS="0")["SESSION_COOKIE_SECURE"] is False
