"""Django's HTTP side under ASGI with one thread hop a request.

Django's own ASGI handler runs a request's sync code through asgiref: a new thread for every
request (its thread-sensitive context), a hop into it for the `request_started` signal, another
for the middleware, one back to the event loop and out again around the view, and one more to
close the response: about a third of a short API request's CPU. Every view and middleware of
the portal is sync, so this handler reads the body on the event loop, then runs the whole
request in one call on a fixed pool of threads, as a WSGI server would: signals, middleware,
view and rendering; the event loop sends the answer. A streaming response (a job's output, a
file) is read on the event loop as Django's handler reads it.

The pool has as many threads as the database pool has connections (`WANKA_DB_POOL_SIZE`), so
a request in a thread always finds one.
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers import base
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.db import close_old_connections
from django.urls import set_script_prefix


class ThreadedASGIHandler(ASGIHandler):
    def __init__(self):
        base.BaseHandler.__init__(self)
        self.load_middleware(is_async=False)
        self.threads = ThreadPoolExecutor(settings.HTTP_THREADS, thread_name_prefix="http")

    async def handle(self, scope, receive, send):
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        loop = asyncio.get_running_loop()
        try:
            response = await loop.run_in_executor(self.threads, self.respond, scope, body_file)
            await self.send_response(response, send)
            if response.streaming:
                await sync_to_async(response.close)()
        finally:
            body_file.close()

    def respond(self, scope, body_file):
        """The response to one request, made in one of the pool's threads; closed (its
        database connection back in the pool) unless it streams, which the event loop closes
        once sent."""
        set_script_prefix(get_script_prefix(scope))
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
        if response.streaming:
            close_old_connections()  # the stream reads in threads of its own
        else:
            response.close()
        return response
