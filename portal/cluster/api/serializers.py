from django.utils.translation import gettext as _
from rest_framework import serializers

from portal.cluster.choices import Health
from portal.cluster.models import FaultEvent, Node
from portal.cluster.summary import from_eighths, node_live
from portal.core.api import KnownFields


class NodeSerializer(serializers.ModelSerializer):
    gpu_model = serializers.CharField(source="gpu_model.name")
    datacenter = serializers.CharField(source="leaf.pod.datacenter.name")
    pod = serializers.CharField(source="leaf.pod.name")
    leaf = serializers.CharField(source="leaf.name")
    gpus_allocated = serializers.SerializerMethodField(
        help_text="GPUs its jobs hold, a share or MIG instance as its part of a GPU"
    )
    health_reason = serializers.SerializerMethodField(
        help_text="Why the node is in its health state (since `health_changed_at`): for "
        "operators, as it may name a job or a person; null for tenants"
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "datacenter",
            "pod",
            "leaf",
            "gpu_model",
            "gpu_count",
            "gpus_allocated",
            "health",
            "health_reason",
            "health_changed_at",
            "spare",
            "connected",
            "last_seen_at",
            "agent_version",
        ]

    def get_gpus_allocated(self, node) -> float:
        return from_eighths(node.eighths_allocated)

    def get_health_reason(self, node) -> str | None:
        return node.health_reason if self.context.get("operator") else None


class NodeDetailSerializer(NodeSerializer):
    """A node with what its agent reported last: the generation of the desired state it has
    reached and its latest telemetry per GPU."""

    live = serializers.SerializerMethodField()

    class Meta(NodeSerializer.Meta):
        fields = [*NodeSerializer.Meta.fields, "generation", "live"]

    def get_live(self, node) -> dict:
        return node_live(node.pk)


class FaultSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")

    class Meta:
        model = FaultEvent
        fields = ["id", "node", "gpu_index", "kind", "code", "severity", "message", "occurred_at"]


class SummaryTotalSerializer(serializers.Serializer):
    nodes = serializers.IntegerField()
    ready_nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    allocated = serializers.IntegerField()
    busy = serializers.FloatField(help_text="Sum of GPU utilization, in GPUs")


class SummaryGroupSerializer(SummaryTotalSerializer):
    datacenter = serializers.CharField()
    gpu_model = serializers.CharField()


class ClusterSummarySerializer(serializers.Serializer):
    ts = serializers.FloatField()
    total = SummaryTotalSerializer()
    groups = SummaryGroupSerializer(many=True)


class EnrolSerializer(serializers.Serializer):
    """What a new node's agent sends to enrol: its bootstrap token, hostname and facts.

    `facts` must name the node's place (`datacenter`, `pod`, `leaf`, from the agent's
    configuration) and its GPUs (`gpu_model`, `gpu_count`); the rest (driver, CUDA, NVLink,
    CPU, memory, NICs) is kept as reported."""

    bootstrap_token = serializers.CharField()
    hostname = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9.\-_]{0,63}$")
    facts = serializers.DictField()

    def validate_facts(self, facts):
        missing = [
            key
            for key in ("datacenter", "pod", "leaf", "gpu_model", "gpu_count")
            if key not in facts
        ]
        if missing:
            raise serializers.ValidationError(_("Missing %(keys)s.") % {"keys": ", ".join(missing)})
        count = facts["gpu_count"]
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= 64:
            raise serializers.ValidationError(_("gpu_count must be an integer from 1 to 64."))
        return facts


class EnrolledSerializer(serializers.Serializer):
    node = serializers.CharField()
    token = serializers.CharField(help_text="The node's agent token; shown this once")


class NodeHealthSerializer(KnownFields, serializers.Serializer):
    health = serializers.ChoiceField(choices=Health.choices)
    reason = serializers.CharField(max_length=200, help_text="Why: kept with the node and audited")


class NodeSpareSerializer(KnownFields, serializers.Serializer):
    spare = serializers.BooleanField(help_text="Keep the node for fault recovery only")
