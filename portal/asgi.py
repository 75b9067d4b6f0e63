"""ASGI entry point: Django for HTTP (one thread hop a request, `core.handler`), Channels for
the agents' and browsers' WebSockets."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup(set_prefix=False)

from portal.core.handler import ThreadedASGIHandler  # noqa: E402

django_asgi_app = ThreadedASGIHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from portal.agents.consumers import AgentConsumer  # noqa: E402
from portal.core.collector import freeze_loaded  # noqa: E402
from portal.dashboard.consumers import LiveConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter(
            [
                # Agents authenticate with their node token and send no Origin header.
                path("ws/agent/", AgentConsumer.as_asgi()),
                path(
                    "ws/live/",
                    AllowedHostsOriginValidator(AuthMiddlewareStack(LiveConsumer.as_asgi())),
                ),
            ]
        ),
    }
)
freeze_loaded()
