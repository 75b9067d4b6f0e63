"""The node agent: wire protocol, machine backends, the agent loop and a simulated fleet.

- `protocol`: message schemas, `parse` and `encode`, shared by the agent and the server.
- `backends`: the `Backend` protocol an agent drives, and `SimulatedBackend`.
- `agent`: `Agent`, one WebSocket connection per node, converging to the desired state.
- `fleet`: many simulated agents in one process (`python -m scheduler.agent.fleet`).

Only `agent` and `fleet` need the `websockets` package; `protocol` and `backends` need nothing
outside the standard library, so the server can import the protocol without pulling in a client.
"""
