"""What the OpenAPI schema says beyond what drf-spectacular reads from the serializers: the
error answers, documented once for every operation (a postprocessing hook): each error is the
API's one shape, `{"errors": [{"field", "reason"}]}` (`api.exception_handler`), under the status
codes the operation can answer with; and that a body takes no field its serializer does not
have (`api.KnownFields`)."""

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import get_doc

from portal.core.api import KnownFields

ERRORS = {
    "type": "object",
    "required": ["errors"],
    "properties": {
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "reason"],
                "properties": {
                    "field": {"type": "string", "nullable": True},
                    "reason": {"type": "string"},
                },
            },
        }
    },
}
WHY = {
    400: "Bad input: each wrong field with its reason",
    401: "No credentials, or a token that is unknown, revoked or expired",
    403: "Not allowed for the caller's role or the token's scope",
    404: "No such object, or not one the caller may see",
    409: "The object's state forbids it now (e.g. the workload has finished)",
    413: "The body is larger than a request may send (DATA_UPLOAD_MAX_MEMORY_SIZE)",
    422: "The Idempotency-Key was used for a different request",
    429: "Too many requests; Retry-After says when to try again",
    503: "Every database connection is in use; Retry-After says when to try again",
}
WRITES = {"post", "put", "patch", "delete"}


def document_errors(result, generator, request, public):
    """Add the error answers each operation may give to its documented responses."""
    result.setdefault("components", {}).setdefault("schemas", {})["Errors"] = ERRORS
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            content = _content(operation)
            for status in _errors(path, method, operation):
                operation["responses"].setdefault(
                    str(status), {"description": WHY[status], "content": content}
                )
    return result


def _content(operation: dict) -> dict:
    """Errors come as JSON, or in the other formats the operation answers in (the usage
    report's CSV has its errors as CSV rows of field and reason)."""
    formats = operation["responses"].get("200", {}).get("content", {})
    content = {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}}
    for media_type in formats:
        content.setdefault(media_type, {"schema": {"type": "string"}})
    return content


def _errors(path: str, method: str, operation: dict) -> list[int]:
    statuses = [401, 403, 429, 503]
    if operation.get("parameters") or "requestBody" in operation or method in WRITES:
        statuses.append(400)
    if "requestBody" in operation:
        statuses.append(413)
    formats = any(p.get("name") == "format" for p in operation.get("parameters", ()))
    if "{" in path or formats:  # DRF answers a format it does not have with 404
        statuses.append(404)
    if method in WRITES:
        statuses += [409, 422]
    return sorted(statuses)


class KnownFieldsOnly(OpenApiSerializerExtension):
    """A `KnownFields` serializer's request body has no other properties: a client generated
    from the schema learns what the API answers a misspelt field with (a 400 naming it). Its
    answers stay open, so that a field added later breaks no client. A serializer without a
    docstring of its own describes nothing, not this mixin."""

    target_class = "portal.core.api.KnownFields"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if schema.get("description") == get_doc(KnownFields):
            del schema["description"]
        return {**schema, "additionalProperties": False} if direction == "request" else schema
