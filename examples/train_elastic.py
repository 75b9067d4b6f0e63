"""A data-parallel PyTorch job that follows Wanka's parallel plan, so a resize keeps its batch.

Run it under torchrun (the agent's environment is torchrun's: ``python -m torch.distributed.run
examples/train_elastic.py`` needs no flags); it trains on the CPU, its processes talking over
gloo. It reads ``WANKA_PARALLEL_PLAN`` (or the plan file the agent leaves beside its
checkpoints): the data-parallel size, the micro-batch size, and the sequences of the global
batch each replica takes (the first ``replicas_with_more`` take one more when the batch does not
divide evenly). Every step:

- the whole global batch is drawn from a generator seeded by the step, so every replica count
  sees the same samples, and each replica takes its share;
- each replica runs its share in micro-batches, accumulating the gradient of its samples' loss
  divided by the global batch, and the replicas sum their gradients: the update is the global
  batch's, whatever the data-parallel size;
- rank 0 decides when to save (``scheduler.agent.contract``), and saves the model and optimizer
  once (they are the same on every replica).

On a restart with another plan (a shrink from 4 processes to 3, say) it resumes from the newest
save and says so: ``resumed from step <n> (saved with DP <a>, now DP <b>)``. Rank 0 prints
``plan DP <d>, micro-batch <m>, shares <...>``, ``step <n> loss <x> samples <global batch>``
every ``--log-every`` steps, and ``finished at step <n>``.

The model is `train_tiny`'s: a small MLP learning a fixed random teacher.
"""

from __future__ import annotations

import argparse
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from train_tiny import INPUTS, make_model, make_teacher  # noqa: E402

from scheduler.agent.contract import ENV_PARALLEL_PLAN, PLAN_FILE, Checkpointing  # noqa: E402


def share(plan: dict, rank: int) -> tuple[int, int]:
    """(first sample, samples) of the global batch that replica `rank` takes."""
    more, fewer = plan["sequences_per_replica"]
    larger = plan["replicas_with_more"]
    start = rank * more if rank < larger else larger * more + (rank - larger) * fewer
    return start, more if rank < larger else fewer


def global_batch(step: int, size: int, teacher: nn.Module):
    """The whole global batch of `step`, the same for every replica count."""
    generator = torch.Generator().manual_seed(step)
    inputs = torch.randn(size, INPUTS, generator=generator)
    return inputs, teacher(inputs)


def main() -> None:
    """Train data-parallel on the plan, saving and resuming as the contract says."""
    args = _parser().parse_args()
    ckpt = Checkpointing.from_env()
    plan = ckpt.plan
    if plan is None:
        raise SystemExit(f"no parallel plan: set {ENV_PARALLEL_PLAN} or leave {PLAN_FILE}")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if (plan["tp"], plan["pp"], plan["dp"]) != (1, 1, world):
        raise SystemExit(f"this example runs data parallelism only; the plan is {plan}")
    say = print if rank == 0 else (lambda *a, **k: None)
    batch, micro = plan["global_batch"], plan["micro_batch"]
    first, mine = share(plan, rank)
    shares = [share(plan, r)[1] for r in range(world)]
    say(f"plan DP {world}, micro-batch {micro}, shares {shares}", flush=True)

    teacher = make_teacher(torch.device("cpu"))
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def load(path: str) -> int:
        state = torch.load(path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        return int(state["step"])

    start = ckpt.resume_step(load)
    if start:
        saved = (ckpt.resume_plan() or {}).get("dp", "?")
        say(f"resumed from step {start} (saved with DP {saved}, now DP {world})", flush=True)
    loss_fn = nn.MSELoss(reduction="sum")
    for step in range(start, args.steps):
        inputs, targets = global_batch(step, batch, teacher)
        inputs, targets = inputs[first : first + mine], targets[first : first + mine]
        optimizer.zero_grad()
        total = torch.zeros(2)  # this replica's summed loss and samples
        for at in range(0, mine, micro):
            loss = loss_fn(model(inputs[at : at + micro]), targets[at : at + micro])
            (loss / (batch * targets.shape[1])).backward()
            total += torch.tensor([loss.item(), len(inputs[at : at + micro])])
        for param in model.parameters():
            dist.all_reduce(param.grad)  # summed: each replica already divided by the batch
        optimizer.step()
        dist.all_reduce(total)
        done = step + 1
        if step % args.log_every == 0 or done == args.steps:
            mean = total[0].item() / (batch * targets.shape[1])
            say(f"step {done} loss {mean:.6f} samples {int(total[1])}", flush=True)
        ckpt.report(done)  # every rank: each node's agent hears of its own progress
        if _decided(rank == 0 and ckpt.due(done)):
            if rank == 0:
                entry = ckpt.save(done, _saver(model, optimizer, done), suffix=".pt")
                say(f"saved step {done} ({entry.kind})", flush=True)
            dist.barrier()  # nobody goes on (or stops) before the save is in place
        if args.sleep_s:
            time.sleep(args.sleep_s)  # stands in for a real step's work
    say(f"finished at step {args.steps}", flush=True)
    dist.destroy_process_group()


def _decided(mine: bool) -> bool:
    """Rank 0's decision, known to every rank."""
    flag = torch.tensor([int(mine)])
    dist.broadcast(flag, src=0)
    return bool(flag.item())


def _saver(model: nn.Module, optimizer, step: int):
    def save(path: str) -> None:
        torch.save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, path
        )

    return save


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--sleep-s", type=float, default=0.0, help="pause after each step")
    return parser


if __name__ == "__main__":
    main()
