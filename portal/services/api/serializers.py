from rest_framework import serializers

from portal.cluster.models import GpuModel
from portal.core.api import KnownFields, NameField
from portal.quotas.api.serializers import TenantQueueField
from portal.services.models import Service, ServiceSample
from portal.workloads.api.serializers import GPU_MODEL_FIELD, MAX_COMMAND, check_gang
from portal.workloads.choices import TERMINAL


class ServiceSerializer(KnownFields, serializers.ModelSerializer):
    queue = TenantQueueField()
    gpu_model = NameField(queryset=GpuModel.objects.all(), **GPU_MODEL_FIELD)
    gpus_per_replica = serializers.IntegerField(min_value=1, max_value=1024)
    max_replicas = serializers.IntegerField(min_value=1, max_value=1000, required=False)
    command = serializers.CharField(max_length=MAX_COMMAND, required=False, allow_blank=True)
    replicas = serializers.SerializerMethodField(help_text="Live replicas, serving or coming")

    class Meta:
        model = Service
        fields = [
            "id",
            "name",
            "queue",
            "gpu_model",
            "gpus_per_replica",
            "min_replicas",
            "max_replicas",
            "target_concurrency",
            "scale_to_zero",
            "stable_window_s",
            "scale_down_delay_s",
            "priority",
            "command",
            "port",
            "active",
            "desired_replicas",
            "replicas",
            "panic",
            "scale_reason",
            "created_at",
        ]
        read_only_fields = ["active", "desired_replicas", "panic", "scale_reason", "created_at"]

    def get_replicas(self, service) -> int:
        if hasattr(service, "live_replicas"):  # annotated by the lists
            return service.live_replicas
        return service.replicas.exclude(workload__state__in=TERMINAL).count()

    def validate_name(self, name):
        user = self.context["request"].user
        taken = Service.objects.filter(tenant=user.membership.tenant, name=name)
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise serializers.ValidationError(f"Your tenant has a service {name} already.")
        return name

    def validate(self, attrs):
        instance = self.instance
        value = lambda name: attrs.get(name, getattr(instance, name, None))  # noqa: E731
        low, high = value("min_replicas") or 0, value("max_replicas") or 10
        if low > high:
            raise serializers.ValidationError(
                {"min_replicas": f"Need min_replicas <= max_replicas; got {low} > {high}."}
            )
        if low == 0 and not value("scale_to_zero"):
            raise serializers.ValidationError(
                {"min_replicas": "0 replicas needs scale_to_zero; or keep at least 1."}
            )
        gpus, model, queue = value("gpus_per_replica"), value("gpu_model"), value("queue")
        check_gang(gpus, model, queue, "gpus_per_replica")
        return attrs


class EndpointSerializer(serializers.Serializer):
    workload = serializers.IntegerField(help_text="The replica's workload")
    host = serializers.CharField()
    port = serializers.IntegerField()
    in_flight = serializers.IntegerField(allow_null=True, help_text="Requests it holds")


class ServiceSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = ServiceSample
        fields = ["at", "in_flight", "requests_per_s", "ready", "desired"]
