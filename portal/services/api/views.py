from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.core.api import TenantViewSet
from portal.core.idempotency import IdempotentCreateModelMixin
from portal.core.models import audit
from portal.services import autoscaling, load
from portal.services.api.serializers import (
    EndpointSerializer,
    ServiceSampleSerializer,
    ServiceSerializer,
)
from portal.services.models import Service, with_live_replicas

# What the chart and the samples endpoint give: the newest this many (an hour at one per 2 s).
SAMPLES = 1800


class ServiceViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    IdempotentCreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    queryset = with_live_replicas(Service.objects.select_related("queue", "gpu_model"))
    serializer_class = ServiceSerializer
    filterset_fields = ["name", "active", "queue__name"]

    def perform_create(self, serializer):
        user = self.request.user
        service = serializer.save(tenant=user.membership.tenant, created_by=user)
        audit("service.created", service, actor=user, tenant=service.tenant)

    def perform_update(self, serializer):
        service = serializer.save()
        audit("service.changed", service, actor=self.request.user, tenant=service.tenant)

    def perform_destroy(self, service):
        """Stopped, not deleted: its replicas are stopped, its record and chart stay."""
        autoscaling.stop(service, actor=self.request.user)
        audit("service.stopped", service, actor=self.request.user, tenant=service.tenant)

    @extend_schema(responses=EndpointSerializer(many=True))
    @action(detail=True)
    def endpoints(self, request, pk=None):
        """The replicas serving now (host, port), for a load balancer (`load.endpoints`)."""
        endpoints = load.endpoints(self.get_object())
        return Response(EndpointSerializer(endpoints, many=True).data)

    @extend_schema(responses=ServiceSampleSerializer(many=True))
    @action(detail=True)
    def samples(self, request, pk=None):
        """The autoscaler's ticks of the last hour, oldest first: load, ready and wanted."""
        samples = self.get_object().samples.order_by("-at", "-id")[:SAMPLES]
        return Response(ServiceSampleSerializer(reversed(samples), many=True).data)
