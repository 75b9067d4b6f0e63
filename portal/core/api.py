"""What every API endpoint shares: tenancy, permissions and the shape of errors."""

import copy
import operator
from collections.abc import Mapping

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.utils.translation import gettext as _
from django.views.defaults import page_not_found
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.exceptions import PermissionDenied
from rest_framework.fields import DateTimeField, Field, SkipField
from rest_framework.relations import PKOnlyObject, SlugRelatedField
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.core.errors import Conflict
from portal.tenancy.models import membership_of


class NameField(serializers.SlugRelatedField):
    """An object named by its slug; a name with a NUL character (which no database column
    holds) is refused as not found, not a server error."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data.replace("\x00", ""))
        return super().to_internal_value(data)


FORM_KEYS = {"csrfmiddlewaretoken"}  # what a browser's form adds (the browsable API's too)


class KnownFields:
    """A serializer that refuses a body's field it does not have, rather than drop it without
    a word (a misspelt `priorty` would leave the job at its default priority). Fields it only
    reads out are accepted and ignored, so that what a GET gave may be sent back."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = [key for key in data if key not in self.fields and key not in FORM_KEYS]
            if unknown:
                writable = ", ".join(n for n, f in self.fields.items() if not f.read_only)
                reason = _("No such field. The fields are: %(fields)s.") % {"fields": writable}
                raise serializers.ValidationError({key: [reason] for key in unknown})
        return super().to_internal_value(data)


def form_fields(serializer_class, posted) -> dict:
    """What a page's form posted for a serializer's fields: the form's own keys (its CSRF
    token, its buttons, choices that only steer the page) are the page's business."""
    fields = serializer_class().fields
    return {key: posted[key] for key in posted if key in fields}


class QuickRows:
    """A serializer's rows read by a plan made at its first row: per readable field, how to
    get its attribute and the field's conversion, without DRF's per-field dispatch on every
    row (a third of the CPU of a list of 50 workloads). The output is DRF's own."""

    def to_representation(self, instance):
        plan = self.__dict__.get("_quick_plan")
        if plan is None:
            plan = self._quick_plan = [
                (field.field_name, _reader(field, instance), _converter(field, instance))
                for field in self._readable_fields
            ]
        row = {}
        for name, read, convert in plan:
            try:
                value = read(instance)
            except SkipField:
                continue
            empty = value is None or (isinstance(value, PKOnlyObject) and value.pk is None)
            row[name] = None if empty else convert(value)
        return row


def _named(field) -> str:
    """Where a row carries the name of a related object a slug field writes, when its query
    put it there as a column (`queue_name` for `queue`): no object is made to read it."""
    return f"{field.source}_{field.slug_field}"


def _converter(field, instance):
    """The field's conversion; a date-time field's with the time zone it converts to looked up
    once, for the whole list, rather than for every value (Django's current time zone is per
    context, slow to read: 0.2 ms for each date column of a page of 50 workloads)."""
    if isinstance(field, SlugRelatedField) and hasattr(instance, _named(field)):
        return str  # the name itself
    if isinstance(field, DateTimeField) and not hasattr(field, "timezone"):
        field.timezone = field.default_timezone()
    return field.to_representation


class FieldsOnce:
    """A model serializer whose fields are worked out from its model once per class, not for
    every instance (0.35 ms of each request of the workload list, whose serializer has 31).
    Each instance still gets fields of its own, bound to it alone: the declared ones deep-copied,
    as DRF copies them, the model's made again from the arguments DRF chose for them. Only for
    serializers whose fields depend on their class alone, not on their instance or context."""

    def get_fields(self):
        cls = type(self)
        if "_class_fields" not in cls.__dict__:
            cls._class_fields = super().get_fields()
        declared = self._declared_fields
        return {
            name: copy.deepcopy(field)
            if name in declared
            else type(field)(*field._args, **field._kwargs)
            for name, field in cls._class_fields.items()
        }


class FormOnce:
    """A filter set whose form class is made once per filter set class: django-filter makes a
    new class for every request (0.2 ms of the workload list's, and a class is garbage only the
    cyclic collector frees). Each request's form still gets its own copies of the fields, as
    any Django form does. Only for filter sets whose filters do not depend on the request (no
    callable querysets)."""

    def get_form_class(self):
        cls = type(self)
        if "_form_class" not in cls.__dict__:
            cls._form_class = super().get_form_class()
        return cls._form_class


def _reader(field, instance):
    """A plain attribute lookup where that is all `Field.get_attribute` would do for rows
    like `instance`, else the field's own."""
    if isinstance(field, SlugRelatedField) and hasattr(instance, _named(field)):
        return operator.attrgetter(_named(field))
    if type(field).get_attribute is Field.get_attribute and len(field.source_attrs) == 1:
        name = field.source_attrs[0]
        if hasattr(instance, name) and not callable(getattr(instance, name)):
            return operator.attrgetter(name)
    return field.get_attribute


def not_found(request, exception):
    """The site's 404: under /api/ the API's error shape (a URL no route matches, such as an
    id that is not a number), elsewhere the portal's page."""
    if request.path.startswith("/api/"):
        reason = "No such object or endpoint, or not one you can see."
        return JsonResponse({"errors": [{"field": None, "reason": reason}]}, status=404)
    return page_not_found(request, exception)


def exception_handler(exc, context):
    """Errors as `{"errors": [{"field": ..., "reason": ...}]}`; `field` is null when the error
    is about the whole request."""
    if isinstance(exc, Conflict):
        return Response(
            {"errors": [{"field": "state", "reason": str(exc)}]}, status=status.HTTP_409_CONFLICT
        )
    if isinstance(exc, RequestDataTooBig):  # Django's own answer would be an HTML page
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        reason = f"The body is over the {limit} bytes a request may send."
        return Response(
            {"errors": [{"field": None, "reason": reason}]},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    response.data = {"errors": list(_flatten(response.data))}
    return response


def _flatten(data, prefix=None):
    if isinstance(data, dict):
        if set(data) == {"detail"}:
            yield {"field": prefix, "reason": str(data["detail"])}
            return
        for key, value in data.items():
            field = None if key == "non_field_errors" else key
            yield from _flatten(value, f"{prefix}.{field}" if prefix and field else field or prefix)
    elif isinstance(data, list):
        for item in data:
            yield from _flatten(item, prefix)
    else:
        yield {"field": prefix, "reason": str(data)}


class TenantPermission(permissions.BasePermission):
    """Members read their tenant's objects; viewers never write; some writes need an admin
    (`write_needs`). Operators (staff in no tenant) read every tenant's."""

    def has_permission(self, request, view):
        membership = membership_of(request.user)
        if membership is None:
            if request.user.is_staff and request.method in permissions.SAFE_METHODS:
                return True
            raise PermissionDenied("You are not a member of any tenant.")
        if request.method in permissions.SAFE_METHODS:
            return True
        if not membership.may(getattr(view, "write_needs", "write")):
            raise PermissionDenied(f"Your role ({membership.get_role_display()}) cannot do this.")
        return True


def is_operator(user) -> bool:
    """Staff in no tenant: the platform's operators."""
    return user.is_authenticated and user.is_staff and membership_of(user) is None


class OperatorPermission(permissions.BasePermission):
    """Only operators: what the operator console does, through the API."""

    message = "Only operators can do this."

    def has_permission(self, request, view):
        return is_operator(request.user)


class TenantOrOperatorPermission(TenantPermission):
    """A tenant's member as `TenantPermission` says, or an operator (on every tenant's)."""

    def has_permission(self, request, view):
        return is_operator(request.user) or super().has_permission(request, view)


class TenantViewSet(viewsets.GenericViewSet):
    """Base of every tenant endpoint: the queryset is always cut to what the caller may see
    (`visible_to`), so another tenant's object is a 404, never a 403 that admits it exists."""

    permission_classes = [permissions.IsAuthenticated, TenantPermission]
    write_needs = "write"

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no caller
            return super().get_queryset().none()
        return super().get_queryset().visible_to(self.request.user)
