from django.conf import settings
from django.db.models import OuterRef, Subquery
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from portal.core.api import (
    OperatorPermission,
    TenantOrOperatorPermission,
    TenantPermission,
    TenantViewSet,
)
from portal.core.idempotency import IdempotentCreateModelMixin
from portal.tenancy.models import membership_of
from portal.workloads import actions, eta, lifecycle, logs
from portal.workloads.advice import advice_report
from portal.workloads.api.renderers import UsageCsvRenderer
from portal.workloads.api.serializers import (
    AdviceQuerySerializer,
    AdviceSerializer,
    EttrQuerySerializer,
    EttrReportSerializer,
    LogQuerySerializer,
    LogsSerializer,
    OperateSerializer,
    PlanAnswerSerializer,
    PlanQuerySerializer,
    PreviewSerializer,
    TimelineSerializer,
    UsageQuerySerializer,
    UsageSerializer,
    WorkloadDetailSerializer,
    WorkloadSerializer,
)
from portal.workloads.ettr import job_report, series, window_report
from portal.workloads.filtersets import WorkloadFilterSet
from portal.workloads.models import Workload, with_version
from portal.workloads.reasons import Reader
from portal.workloads.usage import report
from scheduler import parallelism


def name_of(relation: str) -> Subquery:
    """The name of a row's `relation` as a column of the row (`core.api._named`; made into
    objects, the list's queues and GPU models cost a list of 50 about 0.7 ms). A subquery, not
    a join: the page's count leaves it out, where a join would be counted through row by row
    (2 ms of PostgreSQL a list of a tenant's 2,000 jobs)."""
    model = Workload._meta.get_field(relation).related_model
    return Subquery(model.objects.filter(pk=OuterRef(f"{relation}_id")).order_by().values("name"))


class WorkloadViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, IdempotentCreateModelMixin, TenantViewSet
):
    # The list's rows, built once (made anew, a tenth of a list's CPU): each with its version
    # and the names of its queue and GPU model.
    queryset = with_version(
        Workload.objects.annotate(queue_name=name_of("queue"), gpu_model_name=name_of("gpu_model"))
    )
    serializer_class = WorkloadSerializer
    filterset_class = WorkloadFilterSet
    ordering_fields = ["submitted_at", "priority", "gpus", "estimated_start"]

    def get_serializer_class(self):
        return WorkloadDetailSerializer if self.action == "retrieve" else WorkloadSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action == "list":
            return queryset
        queryset = queryset.select_related("queue", "gpu_model")
        if self.action == "retrieve":
            return queryset.prefetch_related("events", "parallel_plans")
        return queryset

    def perform_create(self, serializer):
        lifecycle.submit(serializer, self.request.user)

    @action(
        detail=True,
        methods=["post"],
        permission_classes=[permissions.IsAuthenticated, TenantOrOperatorPermission],
    )
    def cancel(self, request, pk=None):
        """Cancel the workload (its tenant's members, or operators); 409 once finished."""
        workload = lifecycle.cancel(self.get_object(), actor=request.user)
        return Response(WorkloadSerializer(workload, context={"request": request}).data)

    @extend_schema(request=WorkloadSerializer, responses=PreviewSerializer)
    @action(detail=False, methods=["post"])
    def preview(self, request):
        """What the next scheduling cycle would do with this workload, submitted as it is
        (the same body as a submission; nothing is saved): whether it starts, on how many
        nodes, or why it would wait and its place in its queue; for a job that accepts several
        GPU models, when it would start on each were it its only one (`models`)."""
        membership = membership_of(request.user)
        if membership is None:
            raise PermissionDenied("Only a tenant's members preview their jobs.")
        serializer = WorkloadSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        draft = Workload(tenant=membership.tenant, **serializer.validated_data)
        return Response(eta.preview(draft, request.user.pk, Reader.for_request(request)))

    @extend_schema(request=OperateSerializer, responses=WorkloadSerializer)
    @action(
        detail=True,
        methods=["post"],
        permission_classes=[permissions.IsAuthenticated, OperatorPermission],
    )
    def operate(self, request, pk=None):
        """An operator's action on any tenant's job, with a reason, audited: `preempt` (it
        saves first, then goes back to its queue), `requeue` (it stops at once, back to its
        queue), `checkpoint` (a save now), `priority` (with `priority`), `cancel`; 409 when
        the job's state does not allow it."""
        serializer = OperateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        workload = self.get_object()
        workload = actions.perform(workload, actor=request.user, **serializer.validated_data)
        return Response(WorkloadSerializer(workload, context={"request": request}).data)

    @extend_schema(parameters=[LogQuerySerializer], responses=LogsSerializer)
    @action(detail=True)
    def logs(self, request, pk=None):
        """The workload's output after chunk `since`, oldest first, of one attempt and one
        node when given; `follow` waits for new output while the workload runs."""
        workload = self.get_object()
        query = LogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        options = dict(query.validated_data)
        read = logs.follow if options.pop("follow") else logs.read
        chunks = read(workload, **options)
        since = options["since"]
        return Response(
            LogsSerializer(
                {
                    "chunks": chunks,
                    "next": chunks[-1].id if chunks else since,
                    "more": len(chunks) == logs.READ_LIMIT,
                    "writing": logs.writing(workload),
                    "runs": logs.runs(workload),
                }
            ).data
        )

    @extend_schema(responses=TimelineSerializer)
    @action(detail=True)
    def timeline(self, request, pk=None):
        """Where the workload's time went (ETTR), its checkpoints and its recoveries."""
        workload = self.get_object()
        return Response(
            TimelineSerializer(
                {
                    **job_report(workload),
                    "checkpoints": workload.checkpoints.all(),
                    "recoveries": workload.recoveries.select_related("fault__node"),
                }
            ).data
        )


class EttrView(APIView):
    """Effective training time of the caller's tenant's workloads over a window (default: the
    last 24 hours), with a series of `buckets` equal slices."""

    permission_classes = [permissions.IsAuthenticated, TenantPermission]

    @extend_schema(parameters=[EttrQuerySerializer], responses=EttrReportSerializer)
    def get(self, request):
        query = EttrQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        since, until = query.validated_data["since"], query.validated_data["until"]
        workloads = Workload.objects.visible_to(request.user)
        report = window_report(workloads, since, until)
        report["series"] = series(workloads, since, until, query.validated_data["buckets"])
        return Response(EttrReportSerializer(report).data)


class UsageView(APIView):
    """GPUs in use now, GPU-hours used over a window (default: the last 30 days) and their
    cost, per `group_by` (default: tenant, queue and GPU model): a tenant's own, every
    tenant's for operators; `?format=csv` for a spreadsheet."""

    permission_classes = [permissions.IsAuthenticated, TenantPermission]
    renderer_classes = [*api_settings.DEFAULT_RENDERER_CLASSES, UsageCsvRenderer]

    @extend_schema(parameters=[UsageQuerySerializer], responses=UsageSerializer)
    def get(self, request):
        query = UsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        since, until = query.validated_data["since"], query.validated_data["until"]
        group_by = query.validated_data["group_by"]
        rows = report(Workload.objects.visible_to(request.user), since, until, group_by)
        answer = {
            "since": since,
            "until": until,
            "group_by": group_by,
            "currency": settings.WANKA["CURRENCY"],
            "rows": rows,
            "gpu_hours": sum(r["gpu_hours"] for r in rows),
            "cost": sum(r["cost"] for r in rows),
        }
        response = Response(UsageSerializer(answer).data)
        if request.accepted_renderer.format == "csv":
            name = f"wanka-usage-{since:%Y%m%d}-{until:%Y%m%d}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


class CheckpointAdviceView(APIView):
    """Each checkpoint policy's interval and expected ETTR for a job of `gpus` GPUs, with the
    cluster's observed failure rate (Young/Daly intervals; see scheduler/checkpointing.py)."""

    @extend_schema(parameters=[AdviceQuerySerializer], responses=AdviceSerializer)
    def get(self, request):
        query = AdviceQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        return Response(AdviceSerializer(advice_report(query.validated_data["gpus"])).data)


class ParallelPlansView(APIView):
    """What a model would do on N GPUs: the fastest parallel plan that fits, and the next
    fastest, with predicted iteration time, tokens per second, MFU and memory per GPU."""

    @extend_schema(request=PlanQuerySerializer, responses=PlanAnswerSerializer)
    def post(self, request):
        query = PlanQuerySerializer(data=request.data)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        found = parallelism.plans(
            parallelism.ModelSpec(**q["model"]),
            parallelism.GPUS[q["gpu_model"]],
            q["gpus"],
            q["global_batch"],
            datacenters=q["datacenters"],
            limit=q["alternatives"] + 1,
        )
        if not found:
            why = f"{q['model']['name']} does not fit on {q['gpus']} {q['gpu_model']} GPUs."
            return Response({"errors": [{"field": "gpus", "reason": why}]}, status=400)
        answer = {"plan": found[0].as_json(), "alternatives": [p.as_json() for p in found[1:]]}
        return Response(PlanAnswerSerializer(answer).data)
