from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.core.api import TenantViewSet
from portal.workloads import lifecycle
from portal.workloads.api.serializers import WorkloadDetailSerializer, WorkloadSerializer
from portal.workloads.filtersets import WorkloadFilterSet
from portal.workloads.models import Workload


class WorkloadViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                      mixins.CreateModelMixin, TenantViewSet):
    queryset = Workload.objects.select_related("queue", "gpu_model")
    serializer_class = WorkloadSerializer
    filterset_class = WorkloadFilterSet
    ordering_fields = ["submitted_at", "priority", "gpus"]

    def get_serializer_class(self):
        return WorkloadDetailSerializer if self.action == "retrieve" else WorkloadSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        return queryset.prefetch_related("events") if self.action == "retrieve" else queryset

    def perform_create(self, serializer):
        lifecycle.submit(serializer, self.request.user)

    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel the workload; 409 when it has already finished."""
        workload = lifecycle.cancel(self.get_object(), actor=request.user)
        return Response(WorkloadSerializer(workload, context={"request": request}).data)
