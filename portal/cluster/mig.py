"""MIG layouts as the node agents report them: per GPU, its MIG mode and its MIG devices.

A layout comes with the GPU's telemetry (a heartbeat sample's `mig`, where MIG is on or
pending) and is kept on the GPU's row when it changes, for the cluster map and the node page.
This is what the nodes have, not what is booked; the scheduling cycle reads it to place MIG
jobs (`portal.workloads.cycle`, `scheduler.engine.mig`).
"""

import logging

from portal.cluster.models import Gpu
from scheduler.agent import protocol

log = logging.getLogger(__name__)


def take_layouts(node_name: str, gpus: list[dict]) -> dict[int, dict]:
    """Each sampled GPU's MIG layout ({} for none), taken out of its sample so the live
    telemetry stays as small as before. A malformed layout is logged and left out, so the GPU
    keeps the one on record; the rest of the heartbeat is taken as usual."""
    layouts = {}
    for gpu in gpus:
        layout = gpu.pop("mig", {})
        try:
            _check(layout, gpu["index"])
        except protocol.ProtocolError as error:
            log.warning("node %s: rejected MIG layout: %s", node_name, error)
            continue
        layouts[gpu["index"]] = layout
    return layouts


def record_layouts(node_id: int, layouts: dict[int, dict]) -> None:
    """Keep the layouts that differ from those on record (one query when none does)."""
    changed = []
    for gpu in Gpu.objects.filter(node_id=node_id, index__in=layouts):
        if gpu.mig != layouts[gpu.index]:
            gpu.mig = layouts[gpu.index]
            changed.append(gpu)
    Gpu.objects.bulk_update(changed, ["mig"])


def _check(layout: dict, index: int) -> None:
    if layout:
        protocol.check_mig(layout, f"heartbeat.gpus[{index}].mig")
