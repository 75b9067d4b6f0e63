from django.db.models import Count
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from portal.cluster.api.serializers import (
    ClusterSummarySerializer,
    EnrolledSerializer,
    EnrolSerializer,
    FaultSerializer,
    NodeDetailSerializer,
    NodeSerializer,
)
from portal.cluster.enrolment import enrol
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

    def get_serializer_class(self):
        return NodeDetailSerializer if self.action == "retrieve" else NodeSerializer

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


class EnrolView(APIView):
    """A new node's agent enrols with the one-time bootstrap token an operator gave it."""

    authentication_classes = []
    permission_classes = []
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "enrol"

    @extend_schema(request=EnrolSerializer, responses={201: EnrolledSerializer})
    def post(self, request):
        serializer = EnrolSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        node, token = enrol(data["bootstrap_token"], data["hostname"], data["facts"])
        return Response({"node": node.name, "token": token}, status=status.HTTP_201_CREATED)
