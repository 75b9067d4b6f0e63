from django.db.models import Max
from rest_framework import serializers

from portal.cluster.models import GpuModel, Node
from portal.quotas.api.serializers import TenantQueueField
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.usage import gpu_hours

GPU_MODEL_FIELD = {
    "slug_field": "name",
    "error_messages": {"does_not_exist": "Unknown GPU model {value}."},
}


class WorkloadEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkloadEvent
        fields = ["at", "from_state", "to_state", "reason"]


class WorkloadSerializer(serializers.ModelSerializer):
    queue = TenantQueueField()
    gpu_model = serializers.SlugRelatedField(queryset=GpuModel.objects.all(), **GPU_MODEL_FIELD)
    gpus = serializers.IntegerField(min_value=1)

    class Meta:
        model = Workload
        fields = [
            "id", "name", "queue", "kind", "gpu_model", "gpus", "min_gpus", "max_gpus",
            "priority", "topology", "topology_required", "checkpoint_policy",
            "checkpoint_interval_s", "command", "env", "time_limit_s", "simulated_duration_s",
            "state", "pending_reason", "queue_position", "submitted_at", "admitted_at",
            "started_at", "finished_at", "exit_code",
        ]
        read_only_fields = ["state", "pending_reason", "queue_position", "submitted_at",
                            "admitted_at", "started_at", "finished_at", "exit_code"]

    def validate_env(self, env):
        if not isinstance(env, dict) or not all(isinstance(k, str) for k in env):
            raise serializers.ValidationError("Must be an object of variable names to values.")
        return env

    def validate(self, attrs):
        gpus, model, queue = attrs["gpus"], attrs["gpu_model"], attrs["queue"]
        node_size = Node.objects.filter(gpu_model=model).aggregate(n=Max("gpu_count"))["n"] or 8
        if gpus > node_size and gpus % node_size:
            raise serializers.ValidationError({"gpus": (
                f"Jobs larger than one node take whole nodes: ask for a multiple of {node_size}."
            )})
        lo, hi = attrs.get("min_gpus") or gpus, attrs.get("max_gpus") or gpus
        if not lo <= gpus <= hi:
            raise serializers.ValidationError(
                {"min_gpus": f"Need min_gpus <= gpus <= max_gpus; got {lo} <= {gpus} <= {hi}."}
            )
        ceiling = queue.ceiling(model)
        if gpus > ceiling:
            raise serializers.ValidationError({"gpus": (
                f"Queue {queue.name} can never hold {gpus} {model} GPUs: its quota and what its "
                f"cohort can lend come to {ceiling}. Request more quota first."
            )})
        return attrs


class WorkloadDetailSerializer(WorkloadSerializer):
    events = WorkloadEventSerializer(many=True, read_only=True)
    gpu_hours = serializers.SerializerMethodField(help_text="Booked plus used so far")

    class Meta(WorkloadSerializer.Meta):
        fields = [*WorkloadSerializer.Meta.fields, "gpu_hours", "events"]

    def get_gpu_hours(self, workload) -> float:
        return round(gpu_hours(workload.usage, [workload]), 4)
