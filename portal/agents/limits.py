"""Bounds on what agents send: a connection flooding messages has the excess dropped, and the
faults of one node are recorded once per repeat window and at most so many a minute, whichever
process its agent is connected to (the counts are in Redis)."""

import logging

from portal.cluster.models import FAULT_REPEATS
from portal.core.redis import aclient
from scheduler.faults import Action, FaultKind

log = logging.getLogger(__name__)

# Per connection: heartbeats come every few seconds; a hello, a job's start and exit, acks and
# output add a few more. Beyond this rate, with this burst, messages are dropped.
MESSAGES_PER_S = 50
BURST = 200
# Per node: the same fault (kind and GPU) again within this window is the one already recorded;
# beyond this many a minute further faults are dropped, counted apart for faults that call for
# an action (a job stopped, a GPU reset, the node drained) and those that only inform, so that a
# flood of the one never hides the other.
FAULT_REPEAT_S = 60
FAULTS_PER_MINUTE = 20
# Redis keys "<prefix>seen:<node>:<kind>:<gpu>" and "<prefix>rate:<node>:<act|inform>"
FAULTS = "wanka:faults:"


class Throttle:
    """A token bucket: `rate` messages a second on average, `burst` at once. It counts what it
    refuses, for a report at most once a second."""

    def __init__(self, now: float, rate: float = MESSAGES_PER_S, burst: int = BURST):
        self.rate, self.burst = rate, burst
        self.tokens, self.at = float(burst), now
        self.refused, self.reported_at = 0, float("-inf")

    def admit(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.refused += 1
        return False

    def report(self, now: float) -> int:
        """How many were refused since the last report; 0 when none or reported within the
        last second."""
        if not self.refused or now - self.reported_at < 1:
            return 0
        refused, self.refused, self.reported_at = self.refused, 0, now
        return refused


def _seen(node_id: int, kind: str, gpu: int | None) -> str:
    return f"{FAULT_REPEATS}{node_id}:{kind}:{'-' if gpu is None else gpu}"


async def admit_fault(node, kind: FaultKind, gpu: int | None) -> bool:
    """Whether a fault the node's agent reports is to be recorded. Not when the same kind on the
    same GPU was recorded within FAULT_REPEAT_S (the repeats are counted, and logged at the 1st,
    10th, 100th...), nor beyond FAULTS_PER_MINUTE of the node's of its class (dropped with a
    warning)."""
    redis = aclient()
    seen = _seen(node.pk, kind.code, gpu)
    if not await redis.set(seen, 0, nx=True, ex=FAULT_REPEAT_S):
        repeats = await redis.incr(seen)
        if str(repeats).rstrip("0") == "1":  # 1, 10, 100...: a repeating GPU logs a few lines
            log.info(
                "node %s: fault %s on GPU %s repeated (%d times within %d s): recorded once",
                node.name,
                kind.code,
                gpu,
                repeats,
                FAULT_REPEAT_S,
            )
        return False
    rate = f"{FAULTS}rate:{node.pk}:{'inform' if kind.action == Action.NONE else 'act'}"
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(rate, 0, nx=True, ex=60)
        pipe.incr(rate)
        _, count = await pipe.execute()
    if count > FAULTS_PER_MINUTE:
        await redis.delete(seen)
        log.warning(
            "node %s: fault %s on GPU %s dropped: over %d faults %s in a minute (%d)",
            node.name,
            kind.code,
            gpu,
            FAULTS_PER_MINUTE,
            "that only inform" if kind.action == Action.NONE else "that call for action",
            count,
        )
        return False
    return True


async def forget_fault(node_id: int, kind: str, gpu: int | None) -> None:
    """The fault admitted was not recorded after all: let its next report be."""
    await aclient().delete(_seen(node_id, kind, gpu))
