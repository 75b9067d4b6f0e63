from django.apps import AppConfig


class AgentsConfig(AppConfig):
    """The node agents' door: their WebSocket, what they report, and nodes gone silent."""

    name = "portal.agents"
    label = "agents"
