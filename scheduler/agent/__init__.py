"""The node agent: wire protocol, machine backends, the agent loop and a simulated fleet.

- `protocol`: message schemas, `parse` and `encode`, shared by the agent and the server.
- `backends`: the `Backend` an agent drives, the `Machine` a process backend runs on, and the
  values they exchange.
- `simulated`: simulated GPUs (`SimulatedGpus`) and a simulated node (`SimulatedBackend`), with
  faults for drills.
- `processes`: `ProcessBackend`, workloads as real processes on a `Machine`.
- `nvml`: `NvmlMachine`, real GPUs through NVML (the `nvidia-ml-py` package).
- `contract`: the checkpoint contract with training scripts, and their helper (stdlib only).
- `host`: host facts (CPU, memory, NICs).
- `agent`: `Agent`, one WebSocket connection per node, converging to the desired state.
- `enrolment`: trading a bootstrap token for a node token, and keeping it.
- `cli`: the `wanka-agent` command.
- `fleet`: many simulated agents in one process (`python -m scheduler.agent.fleet`).

Only `agent`, `cli` and `fleet` need the `websockets` package and only `nvml` needs
`nvidia-ml-py`; the rest need nothing outside the standard library, so the server can import
the protocol without pulling in a client.
"""
