"""A tiny but real PyTorch training loop that honours Wanka's checkpoint contract.

A small MLP learns a fixed random "teacher" network from synthetic data. Every batch is made
from the step number, so a run resumed at step n sees exactly the batches a run that never
stopped would have seen. It runs on the GPU when there is one, else on the CPU.

The contract (see `scheduler.agent.contract`):

- a save at the next step when the agent asks (``SIGUSR1`` plus a request file): the control
  plane asks at the job's interval, and on a fault or a preemption; or, run by hand, every
  ``WANKA_CHECKPOINT_INTERVAL_S`` seconds;
- each of the policies (``WANKA_CHECKPOINT_POLICY``): "periodic" stops to save; "async" (and
  "triggered", whose routine saves are asynchronous) copies the state to host memory, goes on
  training and persists it on a background thread; a fault-triggered save is made at once;
- on start, resume from ``WANKA_RESUME_FROM`` or the newest complete save in the manifest.

Each save is one ``torch.save`` of the model, the optimizer and the step. The script prints
``training on <device>`` first, ``step <n> loss <x>`` every ``--log-every`` steps and
``resumed from step <n>`` when it resumes.

    WANKA_CHECKPOINT_DIR=/tmp/ckpt WANKA_CHECKPOINT_INTERVAL_S=5 python examples/train_tiny.py
"""

from __future__ import annotations

import argparse
import time
import warnings

# A CPU build of torch without NumPy says so on every start; nothing here needs NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from scheduler.agent.contract import Checkpointing  # noqa: E402

INPUTS, HIDDEN, OUTPUTS = 32, 64, 4


def make_model() -> nn.Module:
    """The student: a two-layer MLP."""
    return nn.Sequential(nn.Linear(INPUTS, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUTPUTS))


def make_teacher(device: torch.device) -> nn.Module:
    """The fixed function to learn, the same in every run."""
    torch.manual_seed(1234)
    teacher = nn.Sequential(nn.Linear(INPUTS, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, OUTPUTS))
    return teacher.to(device).requires_grad_(False)


def batch(step: int, size: int, teacher: nn.Module, device: torch.device):
    """The batch of `step`: drawn from a generator seeded by the step, so resumable exactly."""
    generator = torch.Generator().manual_seed(step)
    inputs = torch.randn(size, INPUTS, generator=generator).to(device)
    return inputs, teacher(inputs)


def main() -> None:
    """Train, saving and resuming as the contract says."""
    args = _parser().parse_args()
    device = _device(args.device)
    print(f"training on {_describe(device)}", flush=True)
    teacher = make_teacher(device)
    torch.manual_seed(0)
    model = make_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    ckpt = Checkpointing.from_env()

    def load(path: str) -> int:
        state = torch.load(path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"])

    def save_at(step: int):
        def save(path: str) -> None:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            torch.save(state, path)

        return save

    def snapshot(step: int):
        """The state copied to host memory: what an async save makes training wait for."""

        def copy() -> dict:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            return {**copy_to_host(state), "step": step}

        return copy

    start = ckpt.resume_step(load)
    if start:
        print(f"resumed from step {start}", flush=True)
    loss_fn = nn.MSELoss()
    for step in range(start, args.steps):
        inputs, targets = batch(step, args.batch_size, teacher, device)
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        done = step + 1
        if step % args.log_every == 0 or done == args.steps:
            print(f"step {done} loss {loss.item():.6f}", flush=True)
        if ckpt.due(done) and ckpt.next_kind() == "async":
            ckpt.save_async(done, snapshot(done), torch.save, suffix=".pt")
            print(f"saving step {done} (async)", flush=True)
        elif ckpt.due(done):
            entry = ckpt.save(done, save_at(done), suffix=".pt")
            print(f"saved step {done} ({entry.kind}) to {entry.path}", flush=True)
        if args.sleep_s:
            time.sleep(args.sleep_s)  # stands in for a real step's work
    ckpt.wait_persisted()
    print(f"finished at step {args.steps}", flush=True)


def copy_to_host(value):
    """A copy of a (nested) state dict with every tensor on the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: copy_to_host(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(copy_to_host(v) for v in value)
    return value


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _describe(device: torch.device) -> str:
    if device.type != "cuda":
        return str(device)
    return f"{device} ({torch.cuda.get_device_name(device)})"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--sleep-s", type=float, default=0.0, help="pause after each step")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    return parser


if __name__ == "__main__":
    main()
