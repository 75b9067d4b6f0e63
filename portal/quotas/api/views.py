from rest_framework import mixins

from portal.core.api import TenantViewSet
from portal.quotas.api.serializers import QueueSerializer, QuotaRequestSerializer
from portal.quotas.models import Queue, QuotaRequest


class QueueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    queryset = Queue.objects.select_related("region", "cohort").prefetch_related(
        "quotas__gpu_model"
    )
    serializer_class = QueueSerializer
    filterset_fields = ["name", "region__name"]


class QuotaRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TenantViewSet
):
    queryset = QuotaRequest.objects.select_related("queue", "gpu_model", "region")
    serializer_class = QuotaRequestSerializer
    filterset_fields = ["status", "queue__name", "gpu_model__name"]
    write_needs = "admin"

    def perform_create(self, serializer):
        QuotaRequest.file(serializer, self.request.user)
