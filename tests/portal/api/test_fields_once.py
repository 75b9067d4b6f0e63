"""Serializers whose fields are worked out once per class (`FieldsOnce`) still give every
instance, and so every request, fields of its own: DRF's, bound to that instance alone."""

import pytest
from django.test import RequestFactory
from rest_framework import serializers

from portal.workloads.api.serializers import WorkloadDetailSerializer, WorkloadSerializer
from tests.builders import api_client, make_workload

REASON = "reclaimed for workload 9: queue umbrella/prod is over its quota (4/2)"


def _context(user):
    request = RequestFactory().get("/api/v1/workloads/")
    request.user = user
    return {"request": request}


@pytest.mark.parametrize("serializer_class", [WorkloadSerializer, WorkloadDetailSerializer])
def test_the_fields_are_those_drf_would_build(db, serializer_class):
    def described(fields):
        return {name: repr(field) for name, field in fields.items()}

    drf = serializers.ModelSerializer.get_fields(serializer_class())
    assert described(serializer_class().get_fields()) == described(drf)
    assert described(serializer_class().get_fields()) == described(drf)  # from the class's


def test_each_instance_has_fields_of_its_own(bob, operator):
    mine, theirs = (
        WorkloadDetailSerializer(context=_context(bob)),
        WorkloadDetailSerializer(context=_context(operator)),
    )
    mine.fields["name"].required = False

    assert theirs.fields["name"].required is True
    for name, field in mine.fields.items():
        assert field is not theirs.fields[name]
        assert field.parent is mine and theirs.fields[name].parent is theirs
    assert mine.fields["events"].child.context["request"].user == bob
    assert theirs.fields["events"].child.context["request"].user == operator


def test_each_request_reads_as_its_caller(acme_llm, bob, operator, charlie):
    make_workload(acme_llm, "reclaimed", gpus=8, pending_reason=REASON)
    as_bob, as_operator = api_client(bob), api_client(operator)

    for _ in range(2):
        [row] = as_bob.get("/api/v1/workloads/").json()["results"]
        assert "umbrella" not in row["pending_reason"]  # another tenant's queue, unnamed
        [row] = as_operator.get("/api/v1/workloads/").json()["results"]
        assert row["pending_reason"] == REASON
        assert api_client(charlie).get("/api/v1/workloads/").json()["count"] == 0
