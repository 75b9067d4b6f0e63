"""Bounds on what agents send: a connection flooding messages has the excess dropped, and the
faults of one node are recorded once per repeat window and at most so many a minute, whichever
process its agent is connected to (the counts are in Redis)."""

import logging

from portal.core.redis import aclient

log = logging.getLogger(__name__)

# Per connection: heartbeats come every few seconds; a hello, a job's start and exit, acks and
# output add a few more. Beyond this rate, with this burst, messages are dropped.
MESSAGES_PER_S = 50
BURST = 200
# Per node: the same fault (kind and GPU) again within this window is the one already recorded;
# beyond this many a minute further faults are dropped.
FAULT_REPEAT_S = 60
FAULTS_PER_MINUTE = 20
FAULTS = "wanka:faults:"  # Redis keys "<prefix>seen:<node>:<kind>:<gpu>" and "<prefix>rate:<node>"


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
    return f"{FAULTS}seen:{node_id}:{kind}:{'-' if gpu is None else gpu}"


async def admit_fault(node, kind: str, gpu: int | None) -> bool:
    """Whether a fault the node's agent reports is to be recorded. Not when the same kind on the
    same GPU was recorded within FAULT_REPEAT_S (the repeat is counted and logged), nor beyond
    FAULTS_PER_MINUTE of the node's (dropped with a warning)."""
    redis = aclient()
    seen, rate = _seen(node.pk, kind, gpu), f"{FAULTS}rate:{node.pk}"
    if not await redis.set(seen, 0, nx=True, ex=FAULT_REPEAT_S):
        repeats = await redis.incr(seen)
        log.info(
            "node %s: fault %s on GPU %s repeated (%d times within %d s): recorded once",
            node.name,
            kind,
            gpu,
            repeats,
            FAULT_REPEAT_S,
        )
        return False
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(rate, 0, nx=True, ex=60)
        pipe.incr(rate)
        _, count = await pipe.execute()
    if count > FAULTS_PER_MINUTE:
        await redis.delete(seen)
        log.warning(
            "node %s: fault %s on GPU %s dropped: over %d faults in a minute (%d)",
            node.name,
            kind,
            gpu,
            FAULTS_PER_MINUTE,
            count,
        )
        return False
    return True


async def forget_fault(node_id: int, kind: str, gpu: int | None) -> None:
    """The fault admitted was not recorded after all: let its next report be."""
    await aclient().delete(_seen(node_id, kind, gpu))
