"""Live updates for browsers: cluster utilization for everyone signed in, workload and quota
events for the members of their tenant."""

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from portal.core.consumers import DirectDispatch
from portal.core.live import live_groups


class LiveConsumer(DirectDispatch, AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope["user"]
        if not user.is_authenticated:
            await self.close(code=4401)
            return
        self.groups_joined = await database_sync_to_async(live_groups)(user)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_event(self, message):
        await self.send_json({"event": message["event"], "payload": message["payload"]})
