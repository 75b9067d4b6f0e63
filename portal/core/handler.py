"""Django's HTTP side under ASGI with one thread hop a request.

Django's own ASGI handler runs a request's sync code through asgiref: a new thread for every
request (its thread-sensitive context), a hop into it for the `request_started` signal, another
for the middleware, one back to the event loop and out again around the view, and one more to
close the response: about a third of a short API request's CPU. Every view and middleware of
the portal is sync, so this handler reads the body on the event loop, then runs the whole
request in one call on a fixed pool of threads, as a WSGI server would: signals, middleware,
view and rendering; the event loop sends the answer. A streaming response (a job's output, a
file) is sent as Django's handler sends it, and stops when the client goes.

The pool has few threads (`WANKA_HTTP_THREADS`), so requests are answered in the order they
came: dozens of threads would each hold a request and take turns at the interpreter lock in no
order, and some requests would wait for many others' turns. A request that follows a log
(`follow` true on a route of `HTTP_FOLLOW_ROUTES`, as `wanka logs -f` asks) waits for news for
seconds at a time, as a watch does in Kubernetes' API: it runs on a pool of its own
(`WANKA_HTTP_FOLLOW_THREADS`), so that followers never hold up the rest, and gives its database
connection back while it waits. A request that finds no connection free within
`WANKA_DB_POOL_TIMEOUT_S` is answered 503 (`core.busy`). The threads run `async_to_sync` calls
(messages to agents) on the server's event loop, as asgiref's own threads do, not on a new loop
each.
"""

import asyncio
import contextlib
import os
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs

from asgiref.sync import SyncToAsync, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.http import FileResponse
from django.urls import Resolver404, resolve, set_script_prefix


class ThreadedASGIHandler(ASGIHandler):
    def __init__(self):
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.threads = self.followers = None  # made with the first request, on its loop

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        loop = asyncio.get_running_loop()
        if self.threads is None:
            self.threads, self.followers = (
                ThreadPoolExecutor(count, name, initializer=_on_loop, initargs=(loop,))
                for count, name in (
                    (settings.HTTP_THREADS, "http"),
                    (settings.HTTP_FOLLOW_THREADS, "http-follow"),
                )
            )
        pool = self.followers if follows(scope) else self.threads
        response = None
        try:
            response = await loop.run_in_executor(pool, self.respond, scope, body_file)
            if response.streaming:
                await self.stream(response, receive, send)
            else:
                await self.send_response(response, send)
        finally:
            body_file.close()
            if response is not None and response.streaming:
                await sync_to_async(response.close)()  # where the stream read: its connection

    def respond(self, scope, body_file):
        """The response to one request, made in one of the pool's threads; closed (its
        database connection back in the pool) unless it streams, which the event loop closes
        once sent."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
        response._handler_class = self.__class__
        if response.streaming:
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
            close_old_connections()  # the stream reads in threads of its own
        else:
            response.close()
        return response

    async def stream(self, response, receive, send):
        """Send a streaming response until it ends or the client goes, whichever is first."""
        sending = asyncio.create_task(self.send_response(response, send))
        leaving = asyncio.create_task(self.listen_for_disconnect(receive))
        await asyncio.wait([sending, leaving], return_when=asyncio.FIRST_COMPLETED)
        for task in (leaving, sending):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RequestAborted):
                await task


FOLLOW = {"1", "t", "true", "y", "yes", "on"}  # DRF's true values, in any case


def follows(scope) -> bool:
    """Whether a request waits for news: `follow` true in its query, on a route that follows
    (`HTTP_FOLLOW_ROUTES`). Any other request that asks to follow is answered in turn."""
    asked = parse_qs(scope["query_string"].decode("latin-1")).get("follow")
    if not asked or asked[-1].lower() not in FOLLOW:
        return False
    try:
        route = resolve(scope["path"].removeprefix(scope.get("root_path", "")))
    except Resolver404:
        return False
    return route.view_name in settings.HTTP_FOLLOW_ROUTES


def _on_loop(loop):
    """A pool thread's `async_to_sync` runs on the server's event loop."""
    SyncToAsync.threadlocal.main_event_loop = loop
    SyncToAsync.threadlocal.main_event_loop_pid = os.getpid()
