"""Wanka's pure-Python core: the scheduling engine, the node agent and the simulator.

Nothing below this package imports Django; the portal, the simulator and the benchmarks all
call the same code.
"""
