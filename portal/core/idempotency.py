"""`Idempotency-Key` on creating endpoints: a retry with the same key by the same user within a
day gets the first answer again and creates nothing; the same key on a different request is a
422. Keys live in the database, so this holds across processes."""

import hashlib
import json
from datetime import timedelta

from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response

from portal.core.models import IdempotencyKey

HEADER = "Idempotency-Key"
KEEP = timedelta(hours=24)


class KeyReused(APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_code = "idempotency_key_reused"


def _request_hash(request) -> str:
    what = [request.method, request.path, request.data]
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def _checked(key: str) -> str:
    if not (0 < len(key) <= 255 and key.isascii() and key.isprintable()):
        raise ValidationError({HEADER: "Give 1 to 255 printable ASCII characters."})
    return key


def answer_once(request, create) -> Response:
    """The answer of `create()`, or of the first request that sent the same key. The key's row
    is inserted before `create` runs and committed with what it made, so a concurrent request
    with the same key waits for it and then replays its answer; a failure stores nothing."""
    key = _checked(request.headers[HEADER])
    request_hash = _request_hash(request)
    IdempotencyKey.objects.filter(created_at__lt=timezone.now() - KEEP).delete()
    with transaction.atomic():
        record, new = IdempotencyKey.objects.select_for_update().get_or_create(
            user=request.user, key=key, defaults={"request_hash": request_hash}
        )
        if not new:
            if record.request_hash != request_hash:
                raise KeyReused(
                    {HEADER: "This key was used for a different request: use a new key."}
                )
            return Response(
                record.body, status=record.status, headers={"Idempotent-Replayed": "true"}
            )
        response = create()
        record.status, record.body = response.status_code, response.data
        record.save(update_fields=["status", "body"])
    return response


class IdempotentCreateModelMixin(mixins.CreateModelMixin):
    """DRF's create, answered once per `Idempotency-Key` when the request sends one."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                HEADER,
                str,
                OpenApiParameter.HEADER,
                description="Any unique string: a retry with it within 24 hours gets the first "
                "answer and creates nothing (422 if the request differs).",
            )
        ]
    )
    def create(self, request, *args, **kwargs):
        create = super().create
        if HEADER not in request.headers:
            return create(request, *args, **kwargs)
        return answer_once(request, lambda: create(request, *args, **kwargs))
