from rest_framework import serializers

from portal.cluster.models import FaultEvent, Node


class NodeSerializer(serializers.ModelSerializer):
    gpu_model = serializers.CharField(source="gpu_model.name")
    datacenter = serializers.CharField(source="leaf.pod.datacenter.name")
    pod = serializers.CharField(source="leaf.pod.name")
    leaf = serializers.CharField(source="leaf.name")
    gpus_allocated = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = ["id", "name", "datacenter", "pod", "leaf", "gpu_model", "gpu_count",
                  "gpus_allocated", "health", "connected", "last_seen_at", "agent_version"]


class FaultSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")

    class Meta:
        model = FaultEvent
        fields = ["id", "node", "gpu_index", "kind", "code", "severity", "message",
                  "occurred_at"]


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
