"""Live updates for browsers: cluster utilization for everyone signed in, workload and quota
events for the members of their tenant."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from portal.core import fanout
from portal.core.consumers import DirectDispatch
from portal.core.live import live_groups, recheck_user, user_group

CLOSE_REVOKED = 4403  # the user may no longer hear what this socket joined


def _standing(user_id: int, session) -> tuple[list[str], str] | None:
    """What a socket of the user in `session` may hear, read afresh: the groups it joins, and
    the user's password stamp (its session's auth hash); None once it may hear nothing (the
    user deactivated or gone, or the session signed out)."""
    users = get_user_model().objects.select_related("membership")
    user = users.filter(pk=user_id, is_active=True).first()
    if user is None or not session.exists(session.session_key):
        return None
    return [*live_groups(user), user_group(user_id)], user.get_session_auth_hash()


class LiveConsumer(DirectDispatch, AsyncJsonWebsocketConsumer):
    groups_joined: list[str] = []
    standing: tuple[list[str], str] | None = None

    async def connect(self):
        user, session = self.scope["user"], self.scope["session"]
        standing = None
        if user.is_authenticated:
            standing = await database_sync_to_async(_standing)(user.pk, session)
        if standing is None:
            await self.close(code=4401)
            return
        self.standing = standing
        self.groups_joined = standing[0]
        for group in self.groups_joined:
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
        """Live message to `user_group`: the user, their membership or their sessions changed.
        A socket that may no longer hear what it joined (its user deactivated, removed, moved
        to another tenant; its session signed out; the password changed since it opened) hears
        nothing more and is closed; a page still signed in reconnects with what it may hear."""
        user, session = self.scope["user"], self.scope["session"]
        if await database_sync_to_async(_standing)(user.pk, session) != self.standing:
            await self.leave()
            await self.close(code=CLOSE_REVOKED)


def user_saved(sender, instance, created=False, update_fields=None, **kwargs):
    """post_save of a user (a sign-in's `last_login` aside): their sockets look again."""
    if not created and update_fields != frozenset({"last_login"}):
        recheck_user(instance.pk)


def signed_out(sender, request, user, **kwargs):
    """user_logged_out (sent before the session ends): end it now, then the session's
    sockets close (the user's other sessions stay)."""
    if user is not None:
        request.session.flush()
        recheck_user(user.pk)


def membership_changed(sender, instance, created=False, **kwargs):
    """post_save and post_delete of a membership: the member's sockets look again (a new one
    only adds to what they may hear, which their next connection picks up)."""
    if not created:
        recheck_user(instance.user_id)
