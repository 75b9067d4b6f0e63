from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.cluster import checks
from portal.cluster.api.serializers import (
    ClusterSummarySerializer,
    EnrolledSerializer,
    EnrolSerializer,
    FaultSerializer,
    NodeDetailSerializer,
    NodeHealthSerializer,
    NodeSerializer,
    NodeSpareSerializer,
)
from portal.cluster.enrolment import enrol
from portal.cluster.filtersets import FaultFilterSet, NodeFilterSet
from portal.cluster.models import FaultEvent, Node
from portal.cluster.summary import cluster_summary, held_eighths
from portal.core.api import OperatorPermission, TenantViewSet, is_operator
from portal.core.models import counted
from portal.core.throttles import EnrolThrottle


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """The cluster's nodes: shared by every tenant, readable by all, naming no workload."""

    queryset = Node.objects.select_related("gpu_model", "leaf__pod__datacenter")
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet

    def get_queryset(self):
        allocations = Node._meta.get_field("allocations").related_model.objects.all()
        eighths = counted(allocations, "node", held_eighths())
        return super().get_queryset().annotate(eighths_allocated=eighths)

    def get_serializer_class(self):
        return NodeDetailSerializer if self.action == "retrieve" else NodeSerializer

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "operator": is_operator(self.request.user)}

    ordering_fields = ["name", "health"]

    @extend_schema(responses=ClusterSummarySerializer)
    @action(detail=False)
    def summary(self, request):
        return Response(cluster_summary())

    @extend_schema(request=NodeHealthSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"], permission_classes=[OperatorPermission])
    def health(self, request, pk=None):
        """Operators move the node along its lifecycle (cordon, drain, down, repair, ready);
        409 for a move the lifecycle does not allow. Its jobs follow as in the console. A
        repaired node asked to be ready stays repairing until its agent passes a health check
        (409 when no agent is connected to run one)."""
        query = NodeHealthSerializer(data=request.data)
        query.is_valid(raise_exception=True)
        with transaction.atomic():
            node = Node.objects.select_for_update().get(pk=self.get_object().pk)
            checks.move(
                node, query.validated_data["health"], query.validated_data["reason"], request.user
            )
        return Response(self.get_serializer(self.get_queryset().get(pk=node.pk)).data)

    @extend_schema(request=NodeSpareSerializer, responses=NodeSerializer)
    @action(detail=True, methods=["post"], permission_classes=[OperatorPermission])
    def spare(self, request, pk=None):
        """Operators keep the node as a hot spare (for fault recovery only), or not."""
        query = NodeSpareSerializer(data=request.data)
        query.is_valid(raise_exception=True)
        node = self.get_object()
        with transaction.atomic():  # 409 when the node holds a job's GPUs
            node.set_spare(query.validated_data["spare"], request.user)
        return Response(self.get_serializer(self.get_queryset().get(pk=node.pk)).data)


class FaultViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Faults that hit the caller's tenant's workloads."""

    queryset = FaultEvent.objects.select_related("node")
    serializer_class = FaultSerializer
    filterset_class = FaultFilterSet


class EnrolView(APIView):
    """A new node's agent enrols with the one-time bootstrap token an operator gave it."""

    authentication_classes = []
    permission_classes = []
    throttle_classes = [EnrolThrottle]

    @extend_schema(request=EnrolSerializer, responses={201: EnrolledSerializer})
    def post(self, request):
        serializer = EnrolSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        node, token = enrol(data["bootstrap_token"], data["hostname"], data["facts"])
        return Response({"node": node.name, "token": token}, status=status.HTTP_201_CREATED)
