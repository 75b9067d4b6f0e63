"""When every pooled database connection is taken for longer than the pool waits: a 503 with
`Retry-After` that says so, rather than a 500 (and nothing half done, since the request got no
connection to do anything with)."""

import logging

from django.db import OperationalError
from django.http import JsonResponse
from psycopg_pool import PoolTimeout

log = logging.getLogger(__name__)

RETRY_AFTER_S = 2


class DatabaseBusyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, OperationalError | PoolTimeout):
            return None
        if not isinstance(exception, PoolTimeout) and not isinstance(
            exception.__cause__, PoolTimeout
        ):
            return None
        log.warning("database pool exhausted: %s %s answered 503", request.method, request.path)
        reason = "The portal is busy: every database connection is in use. Try again shortly."
        response = JsonResponse({"errors": [{"field": None, "reason": reason}]}, status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
