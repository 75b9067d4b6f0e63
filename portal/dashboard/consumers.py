"""Live updates for browsers: cluster utilization for everyone signed in, workload and quota
events for the members of their tenant."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from portal.core import fanout
from portal.core.consumers import DirectDispatch
from portal.core.live import live_groups, recheck_user, user_group

CLOSE_REVOKED = 4403  # the user may no longer hear what this socket joined


def _groups(user_id: int) -> list[str] | None:
    """The groups a socket of the user joins, read afresh; None for a user who may have none
    (deactivated or gone)."""
    users = get_user_model().objects.select_related("membership")
    user = users.filter(pk=user_id, is_active=True).first()
    return None if user is None else [*live_groups(user), user_group(user_id)]


class LiveConsumer(DirectDispatch, AsyncJsonWebsocketConsumer):
    groups_joined: list[str] = []

    async def connect(self):
        user = self.scope["user"]
        groups = await database_sync_to_async(_groups)(user.pk) if user.is_authenticated else None
        if groups is None:
            await self.close(code=4401)
            return
        self.groups_joined = groups
        for group in groups:
            await fanout.hub().join(group, self)
        await self.accept()

    async def disconnect(self, code):
        await self.leave()

    async def leave(self):
        groups, self.groups_joined = self.groups_joined, []
        for group in groups:
            fanout.hub().leave(group, self)

    async def live_event(self, message):
        await self.send_json({"event": message["event"], "payload": message["payload"]})

    async def live_recheck(self, message):
        """Live message to `user_group`: the user or their membership changed. A socket whose user
        may no longer hear what it joined (deactivated, removed, moved to another tenant) hears
        nothing more and is closed; the page reconnects with what the user may hear now."""
        if await database_sync_to_async(_groups)(self.scope["user"].pk) != self.groups_joined:
            await self.leave()
            await self.close(code=CLOSE_REVOKED)


def user_saved(sender, instance, created=False, update_fields=None, **kwargs):
    """post_save of a user (a sign-in's `last_login` aside): their sockets look again."""
    if not created and update_fields != frozenset({"last_login"}):
        recheck_user(instance.pk)


def membership_changed(sender, instance, created=False, **kwargs):
    """post_save and post_delete of a membership: the member's sockets look again (a new one
    only adds to what they may hear, which their next connection picks up)."""
    if not created:
        recheck_user(instance.user_id)
