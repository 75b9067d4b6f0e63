"""The demo installation standalone mode starts with: a two-data-center cluster, two tenants
with queues in cohorts, a few jobs, an inference service whose valleys fine-tuning borrows, a
pending quota request, GPU prices, and budgets (one that the demo's traffic runs through in
about two hours, so that its warnings show)."""

from django.contrib.auth.models import User
from django.db import transaction

from portal.cluster.models import DataCenter, GpuModel, Leaf, Node, Pod, Region
from portal.quotas.models import Budget, Cohort, GpuRate, Queue, QueueQuota, QuotaRequest
from portal.services.models import Service
from portal.tenancy.choices import Role
from portal.tenancy.models import Membership, Tenant
from portal.workloads.models import Workload

PASSWORD = "wanka-demo"
NODES_PER_LEAF = 8
MEMORY_GB = {"H800": 80, "H20": 96}
FAMILY = {"H800": "hopper", "H20": "hopper"}

# data center -> pods -> (GPU model, leaves)
LAYOUT = {
    "sh-a": {"p1": ("H800", 2), "p2": ("H800", 2)},
    "sh-b": {"p1": ("H800", 2), "p2": ("H20", 2)},
}

USERS = [
    # username, tenant, role
    ("operator", None, None),
    ("alice", "Acme", Role.ADMIN),
    ("bob", "Acme", Role.MEMBER),
    ("victor", "Acme", Role.VIEWER),
    ("charlie", "Globex", Role.ADMIN),
]

QUEUES = [
    # tenant, queue, cohort, priority, {model: (guarantee, nominal, borrowing limit)}
    ("Acme", "llm", "research", 10, {"H800": (64, 192, 64)}),
    ("Acme", "sft", "h20", 0, {"H20": (0, 64, None)}),
    ("Globex", "train", "research", 10, {"H800": (32, 128, 64)}),
    # Its quota covers the chat service's peak; the valleys are lent to Acme's fine-tuning.
    ("Globex", "infer", "h20", 20, {"H20": (8, 64, None)}),
]

JOBS = [
    # tenant, queue, name, kind, model, GPUs, simulated seconds
    ("Acme", "llm", "llama-8b-pretrain", "training", "H800", 64, 3600),
    ("Acme", "llm", "moe-ablation-3", "training", "H800", 16, 900),
    # Needs 16 whole nodes under one leaf switch, which has 8: waits, saying so.
    ("Acme", "llm", "long-context-128k", "training", "H800", 128, 1800),
    ("Acme", "sft", "qwen-sft-support", "sft", "H20", 8, 1200),
    ("Globex", "train", "recsys-ranker", "training", "H800", 32, 2400),
    ("Globex", "infer", "canary-eval", "inference", "H20", 8, 7200),
]
# The service `standalone` drives through a day in 24 minutes (`manage.py loadgen`).
SERVICE = {
    "name": "chat",
    "gpus_per_replica": 8,
    "min_replicas": 1,
    "max_replicas": 6,
    "target_concurrency": 8,
    "command": "vllm serve Qwen/Qwen2.5-72B-Instruct --tensor-parallel-size 8 --port $PORT",
}
DEMO_DAY_S = 1440
# GPU model -> (what a GPU-hour counts against budgets, its price per hour in WANKA_CURRENCY):
# an operator's list prices, made up for the demo.
RATES = {"H800": (1.0, "2.80"), "H20": (0.4, "1.20")}
BUDGETS = [
    # tenant, queue (None: the whole tenant), weighted GPU-hours, window, days, thresholds
    ("Acme", None, 60_000, "month", 30, [80, 100]),
    ("Acme", "llm", 150, "rolling", 1, [50, 80, 100]),
]


@transaction.atomic
def seed() -> bool:
    """Create the demo installation; returns False (and changes nothing) if it exists."""
    if Tenant.objects.exists():
        return False
    build_cluster()
    tenants = {
        name: Tenant.objects.create(name=name, slug=name.lower())
        for name in {t for _, t, _ in USERS if t}
    }
    users = {}
    for username, tenant, role in USERS:
        users[username] = User.objects.create_user(
            username, password=PASSWORD, is_staff=tenant is None, is_superuser=tenant is None
        )
        if tenant:
            Membership.objects.create(user=users[username], tenant=tenants[tenant], role=role)
    queues = _queues(tenants)
    for tenant, queue, name, kind, model, gpus, seconds in JOBS:
        Workload.objects.create(
            tenant=tenants[tenant],
            queue=queues[tenant, queue],
            name=name,
            kind=kind,
            gpu_model=GpuModel.objects.get(name=model),
            gpus=gpus,
            simulated_duration_s=seconds,
            submitted_by=users["bob" if tenant == "Acme" else "charlie"],
            command="torchrun --nnodes=$NNODES train.py",
            topology="leaf" if gpus > 64 else "pod",
            topology_required=gpus > 64,
            checkpoint_policy="triggered" if kind == "training" and gpus >= 32 else "async",
        )
    Service.objects.create(
        tenant=tenants["Globex"],
        queue=queues["Globex", "infer"],
        gpu_model=GpuModel.objects.get(name="H20"),
        created_by=users["charlie"],
        **SERVICE,
    )
    # One hot spare per pod, kept free for fault recovery.
    Pod.objects.update(hot_spares=1)
    for pod in Pod.objects.all():
        Node.objects.filter(pk=pod.leaves.last().nodes.last().pk).update(spare=True)
    for model, (weight, price) in RATES.items():
        GpuRate.objects.create(
            gpu_model=GpuModel.objects.get(name=model), weight=weight, price=price
        )
    for tenant, queue, hours, window, days, thresholds in BUDGETS:
        Budget.objects.create(
            tenant=tenants[tenant],
            queue=queues[tenant, queue] if queue else None,
            gpu_hours=hours,
            window=window,
            window_days=days,
            thresholds=thresholds,
        )
    QuotaRequest.objects.create(
        tenant=tenants["Acme"],
        queue=queues["Acme", "llm"],
        requested_by=users["alice"],
        gpu_model=GpuModel.objects.get(name="H800"),
        region=Region.objects.get(),
        count=32,
        reason="Llama 8B continued pre-training needs 32 more H800 for four weeks.",
    )
    return True


def build_cluster(layout=LAYOUT, nodes_per_leaf=NODES_PER_LEAF, region="cn-east") -> list:
    """Create region > data centers > pods > leaves > nodes from
    {data center: {pod: (GPU model, leaves)}}; return the nodes."""
    region, _ = Region.objects.get_or_create(name=region)
    nodes = []
    for dc_name, pods in layout.items():
        dc = DataCenter.objects.create(region=region, name=dc_name)
        for pod_name, (model, leaves) in pods.items():
            gpu_model, _ = GpuModel.objects.get_or_create(
                name=model,
                defaults={"memory_gb": MEMORY_GB.get(model, 80), "family": FAMILY.get(model, "")},
            )
            pod = Pod.objects.create(datacenter=dc, name=pod_name)
            for leaf_no in range(1, leaves + 1):
                leaf = Leaf.objects.create(pod=pod, name=f"l{leaf_no}")
                nodes += [
                    Node(
                        name=f"{dc_name}-{pod_name}-{leaf.name}-n{i:02d}",
                        leaf=leaf,
                        gpu_model=gpu_model,
                    )
                    for i in range(1, nodes_per_leaf + 1)
                ]
    return Node.objects.bulk_create(nodes)


def ensure_nodes(count: int, model="H800", nodes_per_leaf=32, leaves_per_pod=16) -> int:
    """Make sure the database has at least `count` nodes, adding simulated ones in a data
    center of their own ("sim", pods of 16 leaves of 32 nodes); return how many were added."""
    missing = count - Node.objects.count()
    if missing <= 0:
        return 0
    region = Region.objects.first() or Region.objects.create(name="cn-east")
    dc, _ = DataCenter.objects.get_or_create(name="sim", defaults={"region": region})
    gpu_model, _ = GpuModel.objects.get_or_create(name=model, defaults={"memory_gb": 80})
    nodes, serial = [], Node.objects.filter(leaf__pod__datacenter=dc).count()
    for number in range(serial, serial + missing):
        pod_no, leaf_no = divmod(number // nodes_per_leaf, leaves_per_pod)
        pod, _ = Pod.objects.get_or_create(datacenter=dc, name=f"p{pod_no + 1}")
        leaf, _ = Leaf.objects.get_or_create(pod=pod, name=f"l{leaf_no + 1}")
        nodes.append(Node(name=f"sim-{number + 1:05d}", leaf=leaf, gpu_model=gpu_model))
    Node.objects.bulk_create(nodes, batch_size=1000)
    return missing


def _queues(tenants) -> dict:
    region = Region.objects.get()
    queues = {}
    for tenant, name, cohort, priority, quotas in QUEUES:
        queue = queues[tenant, name] = Queue.objects.create(
            tenant=tenants[tenant],
            name=name,
            region=region,
            priority=priority,
            cohort=Cohort.objects.get_or_create(name=cohort)[0] if cohort else None,
        )
        for model, (guarantee, nominal, borrowing) in quotas.items():
            QueueQuota.objects.create(
                queue=queue,
                gpu_model=GpuModel.objects.get(name=model),
                guarantee=guarantee,
                nominal=nominal,
                borrowing_limit=borrowing,
            )
    return queues


# Jobs the demo keeps submitting so that the standalone dashboard stays alive:
# tenant, queue, name, kind, model, choices of GPUs, seconds from/to.
TRAFFIC = [
    ("Acme", "llm", "ablation", "training", "H800", (8, 16, 32), (120, 600)),
    ("Acme", "sft", "sft", "sft", "H20", (1, 2, 4, 8), (60, 300)),
    ("Globex", "train", "ranker", "training", "H800", (16, 32), (180, 900)),
    ("Globex", "infer", "canary", "inference", "H20", (2, 4), (60, 240)),
]
MAX_PENDING = 3


def submit_traffic(rng) -> Workload | None:
    """Submit one random demo job, unless enough are waiting already."""
    if Workload.objects.filter(state="pending").count() >= MAX_PENDING:
        return None
    tenant, queue, prefix, kind, model, sizes, (low, high) = rng.choice(TRAFFIC)
    queue = Queue.objects.filter(tenant__name=tenant, name=queue).first()
    if queue is None:
        return None
    count = Workload.objects.filter(tenant=queue.tenant, name__startswith=prefix).count()
    return Workload.objects.create(
        tenant=queue.tenant,
        queue=queue,
        name=f"{prefix}-{count + 1}",
        kind=kind,
        gpu_model=GpuModel.objects.get(name=model),
        gpus=rng.choice(sizes),
        simulated_duration_s=rng.randint(low, high),
        topology="pod",
        submitted_by=queue.tenant.memberships.exclude(role=Role.VIEWER).first().user,
    )
