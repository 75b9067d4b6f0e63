"""A fixed reference loop, timed in the same run as a benchmark, so that figures taken on
different machines, or on one machine under different loads, can be compared: a plain Python
loop of 10 million additions, run as a script's top level runs it (its names are globals).
The targets of `bench.engine` and `bench.sim` were set where it took 1.17 s.

    python -m bench.reference
"""

import json
import time

LOOP = compile("total = 0\nfor i in range(10_000_000):\n    total += i\n", "<reference>", "exec")


def reference_s(repeat: int = 3) -> float:
    """The best of `repeat` timings of the reference loop, in seconds."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        exec(LOOP, {})
        times.append(time.perf_counter() - started)
    return round(min(times), 3)


def in_loops(seconds: float, reference: float) -> float:
    """`seconds` expressed in reference loops."""
    return round(seconds / reference, 3)


if __name__ == "__main__":
    print(json.dumps({"reference_s": reference_s()}))
