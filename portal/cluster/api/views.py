from django.db.models import Count
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.cluster.api.serializers import (
    ClusterSummarySerializer,
    FaultSerializer,
    NodeSerializer,
)
from portal.cluster.filtersets import FaultFilterSet, NodeFilterSet
from portal.cluster.models import FaultEvent, Node
from portal.cluster.summary import cluster_summary
from portal.core.api import TenantViewSet


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """The cluster's nodes: shared by every tenant, readable by all, naming no workload."""

    queryset = Node.objects.select_related("gpu_model", "leaf__pod__datacenter").annotate(
        gpus_allocated=Count("allocations")
    )
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    ordering_fields = ["name", "health"]

    @extend_schema(responses=ClusterSummarySerializer)
    @action(detail=False)
    def summary(self, request):
        return Response(cluster_summary())


class FaultViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Faults that hit the caller's tenant's workloads."""

    queryset = FaultEvent.objects.select_related("node")
    serializer_class = FaultSerializer
    filterset_class = FaultFilterSet
    tenant_field = "workloads__tenant"

    def get_queryset(self):
        return super().get_queryset().distinct()
