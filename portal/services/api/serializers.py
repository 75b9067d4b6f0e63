from django.utils.translation import gettext as _
from rest_framework import serializers

from portal.cluster.models import GpuModel
from portal.core.api import KnownFields, NameField
from portal.quotas.api.serializers import TenantQueueField
from portal.services.models import Service, ServiceSample
from portal.workloads.api.serializers import (
    GPU_MODEL_FIELD,
    MAX_COMMAND,
    GpusField,
    as_share,
    check_gang,
)
from portal.workloads.choices import TERMINAL


class ServiceSerializer(KnownFields, serializers.ModelSerializer):
    queue = TenantQueueField()
    gpu_model = NameField(queryset=GpuModel.objects.all(), **GPU_MODEL_FIELD)
    gpus_per_replica = GpusField(
        source="replica_share",
        min_value=0.01,
        max_value=1024,
        help_text="Whole GPUs per replica, or a share of one (0.25): replicas of a share run "
        "beside other shares on one GPU, through MPS or time slicing",
    )
    gpu_memory_gb = serializers.FloatField(
        min_value=0.1,
        required=False,
        write_only=True,
        help_text="GPU memory a replica of a share needs; its share is at least that much",
    )
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
            "gpu_memory_gb",
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
            raise serializers.ValidationError(
                _("Your tenant has a service %(name)s already.") % {"name": name}
            )
        return name

    def validate(self, attrs):
        instance = self.instance
        value = lambda name: attrs.get(name, getattr(instance, name, None))  # noqa: E731
        low, high = value("min_replicas") or 0, value("max_replicas") or 10
        if low > high:
            why = _("Need min_replicas <= max_replicas; got %(low)s > %(high)s.") % {
                "low": low,
                "high": high,
            }
            raise serializers.ValidationError({"min_replicas": why})
        if low == 0 and not value("scale_to_zero"):
            raise serializers.ValidationError(
                {"min_replicas": _("0 replicas needs scale_to_zero; or keep at least 1.")}
            )
        _replica_size(attrs, value("gpu_model"))
        gpus, model, queue = value("gpus_per_replica"), value("gpu_model"), value("queue")
        check_gang(gpus, model, queue, "gpus_per_replica")
        return attrs


def _replica_size(attrs, model: GpuModel) -> None:
    """`gpus_per_replica` (and `gpu_memory_gb`) as whole GPUs or a share of one, as a job's
    `gpus` are (`as_share`), its errors said of `gpus_per_replica`."""
    if "replica_share" not in attrs:
        if attrs.pop("gpu_memory_gb", None) is not None:
            why = _("gpu_memory_gb sizes a replica's share: give gpus_per_replica with it.")
            raise serializers.ValidationError({"gpu_memory_gb": why})
        return
    asked = {
        "gpu_share": attrs.pop("replica_share"),
        "gpu_memory_gb": attrs.pop("gpu_memory_gb", None),
        "gpu_model": model,
    }
    try:
        as_share(asked)
    except serializers.ValidationError as exc:
        named = {("gpus_per_replica" if k == "gpus" else k): v for k, v in exc.detail.items()}
        raise serializers.ValidationError(named) from None
    attrs["gpus_per_replica"], attrs["replica_slices"] = asked["gpus"], asked["slices"]


class EndpointSerializer(serializers.Serializer):
    workload = serializers.IntegerField(help_text="The replica's workload")
    host = serializers.CharField()
    port = serializers.IntegerField()
    in_flight = serializers.IntegerField(allow_null=True, help_text="Requests it holds")


class ServiceSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = ServiceSample
        fields = ["at", "in_flight", "requests_per_s", "ready", "desired"]
