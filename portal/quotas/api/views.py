from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.core.api import OperatorPermission, TenantViewSet
from portal.core.errors import Conflict
from portal.core.idempotency import IdempotentCreateModelMixin
from portal.core.models import audit
from portal.core.triggers import trigger_cycle
from portal.quotas.api.serializers import (
    DecisionSerializer,
    QueueChangeSerializer,
    QueueSerializer,
    QuotaRequestSerializer,
)
from portal.quotas.models import Queue, QuotaRequest


class QueueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    queryset = Queue.objects.select_related("region", "cohort").prefetch_related(
        "quotas__gpu_model", "family_quotas"
    )
    serializer_class = QueueSerializer
    filterset_fields = ["name", "region__name"]

    @extend_schema(request=QueueChangeSerializer, responses=QueueSerializer)
    @action(detail=True, methods=["post"], permission_classes=[OperatorPermission])
    def change(self, request, pk=None):
        """Operators change a queue's cohort, priority, weight, strategy and preemption
        settings, saying why; the change is audited with what it was before, and a scheduling
        cycle runs on it at once."""
        queue = self.get_object()
        change = QueueChangeSerializer(queue, data=request.data, partial=True)
        change.is_valid(raise_exception=True)
        reason = change.validated_data.pop("reason")
        before = QueueChangeSerializer(queue).data
        with transaction.atomic():
            change.save()
            after = QueueChangeSerializer(queue).data
            changed = {k: [before[k], after[k]] for k in after if before[k] != after[k]}
            audit(
                "queue.changed",
                queue,
                actor=request.user,
                tenant=queue.tenant,
                changed=changed,
                reason=reason,
            )
            trigger_cycle()
        return Response(QueueSerializer(self.get_queryset().get(pk=queue.pk)).data)


class QuotaRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, IdempotentCreateModelMixin, TenantViewSet
):
    queryset = QuotaRequest.objects.select_related("queue", "gpu_model", "region")
    serializer_class = QuotaRequestSerializer
    filterset_fields = ["status", "queue__name", "gpu_model__name"]
    write_needs = "admin"

    def perform_create(self, serializer):
        QuotaRequest.file(serializer, self.request.user)

    @extend_schema(request=DecisionSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"], permission_classes=[OperatorPermission])
    def approve(self, request, pk=None):
        """Operators approve: the queue's nominal quota grows, if the region's capacity still
        has room (409 with the capacity check when not, or when already decided)."""
        return self._decide(request, approve=True)

    @extend_schema(request=DecisionSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"], permission_classes=[OperatorPermission])
    def reject(self, request, pk=None):
        """Operators reject (409 when already decided)."""
        return self._decide(request, approve=False)

    def _decide(self, request, approve):
        decision = DecisionSerializer(data=request.data)
        decision.is_valid(raise_exception=True)
        quota_request = self.get_object()
        if not quota_request.decide(request.user, approve, decision.validated_data["note"]):
            quota_request.refresh_from_db()
            verb = "approved" if approve else "rejected"
            check = quota_request.capacity_check()
            raise Conflict(f"Not {verb}: the request is {quota_request.status}; {check}.")
        return Response(QuotaRequestSerializer(quota_request, context={"request": request}).data)
