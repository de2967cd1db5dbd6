"""One RL step of astrai's Trainer vs a bare loop over the same modules, in paired rounds.

astrai: ``Trainer.train_step()`` of the default job (GRPO, ``model=tiny``, the default task and
reward; ``--prompts``/``--group`` resize it). Bare: the same step written inline here with no
Trainer, strategy, metrics or logging: the same policy and frozen reference and reward function,
group-normalised advantages, the clipped surrogate + ``kl_coef`` × k3 KL token means, AdamW (the
run's cosine learning rate) and grad-norm clipping. It samples the way a hand-written loop does
(``--bare-decode forward``, the default): the model's own ``forward`` with its KV cache, one
token per step, drawing by the sampler's rule (one uniform per row, inverse CDF) so it draws the
same tokens; ``--bare-decode sampler`` gives it astrai's sampler instead
(``astrai.rollout.engines.sampler.generate``, with its fast decode path and shared prompt pass). The
bare loop scores the reference over every row whole, as a hand-written loop does; astrai
runs it through the update's own micro-batches since issue 59 (before, each distinct prompt
once: ``astrai.models.shared_prefix``, still the sampler's and PPO's critic's). Both start
every round from the same weights, optimizer and RNG states, so they sample the same responses
and take the same optimizer steps; a first paired step (also the warm-up) checks that the
weights then agree (within ``WEIGHT_TOLERANCE``: the fast path's logprobs differ from
``forward``'s in the last bits). Each round times
``--steps-per-round`` steps of each, in alternating order; a step's time is the whole
``train_step()`` call (its own ``perf/step_s``, which leaves out the rollout metrics, is shown
beside it). The last line is ``ratio: <astrai ÷ bare>``, the median of the rounds' ratios.

    python bench/step_overhead.py [--rounds 10] [--threads 1] [--steps-per-round 1]
        [--bare-decode forward|sampler] [--override KEY=VALUE ...]
    python bench/step_overhead.py --quick   # the math check and one small round (CI)
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from astrai.config.compose import compose_train_config
from astrai.rollout.engines.sampler import Generation, SamplingConfig, _choose, generate
from astrai.training.run import Run

# max |Δ| of any policy weight after the check step: the last bits of the decode paths'
# logprobs (and of the reference's pass: astrai's runs the update's micro-batches since issue
# 59, the bare loop all rows at once) reach the weights through AdamW's normalised steps
# (--quick on an AMD EPYC: 1.0e-5 of 7.1e-3 moved)
WEIGHT_TOLERANCE = 3e-5


# the bare loop implements these options' values only (the default job's)
PLAIN_OPTIONS = {
    "advantage": "grpo",
    "scale_rewards": "group",
    "kl_estimator": "k3",
    "loss_agg": "token_mean",
    "clip_eps_low": None,
    "clip_eps_high": None,
    "clip_ratio_c": None,
    "ratio_level": "token",
    "mask_truncated": False,
    "filter_groups": False,
    "micro_batch_size": None,
}


@dataclass(frozen=True)
class Hyper:
    """The job's hyperparameters as plain values (no config lookups inside the bare step)."""

    seed: int
    prompts: int
    group: int
    epochs: int
    minibatches: int
    sampling: SamplingConfig
    adv_eps: float
    clip_eps: float
    kl_coef: float
    lr: float
    betas: tuple[float, float]
    weight_decay: float
    foreach: bool
    warmup_steps: int
    min_lr_ratio: float
    max_grad_norm: float
    optimizer_steps: int  # of the whole run: the cosine schedule's length

    @classmethod
    def from_config(cls, cfg: DictConfig) -> Hyper:
        tt = cfg.train_type
        for key, value in PLAIN_OPTIONS.items():
            assert tt[key] == value, f"the bare loop needs train_type.{key}={value}"
        assert tt.scheduler._target_.endswith("warmup_cosine"), "the bare loop's schedule"
        assert cfg.infra.precision == "fp32", "the bare loop runs in float32"
        sampling = OmegaConf.to_container(tt.sampling)
        assert isinstance(sampling, dict)
        sampling.pop("_target_", None)
        return cls(
            seed=cfg.seed,
            prompts=tt.prompts_per_step,
            group=tt.group_size,
            epochs=tt.ppo_epochs,
            minibatches=tt.minibatches,
            sampling=SamplingConfig(**sampling),
            adv_eps=tt.adv_eps,
            clip_eps=tt.clip_eps,
            kl_coef=tt.kl_coef,
            lr=tt.optimizer.lr,
            betas=tuple(tt.optimizer.betas),
            weight_decay=tt.optimizer.weight_decay,
            foreach=tt.optimizer.foreach,
            warmup_steps=tt.scheduler.warmup_steps,
            min_lr_ratio=tt.scheduler.min_lr_ratio,
            max_grad_norm=cfg.trainer.max_grad_norm,
            optimizer_steps=cfg.trainer.total_steps * tt.ppo_epochs * tt.minibatches,
        )

    def learning_rate(self, step: int) -> float:
        """``training.optim.warmup_cosine`` at optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        span = max(1, self.optimizer_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.lr * (self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine)


@dataclass
class BareLoop:
    """What the bare step uses: the Trainer's modules (policy, frozen reference, task,
    tokenizer, reward function; never its strategy, optimizer or logger) and plain values."""

    trainer: Run
    hp: Hyper
    decode: str = "forward"  # or "sampler": astrai's ``generate``

    def __post_init__(self) -> None:
        terms = self.trainer.parts.reward.terms
        assert len(terms) == 1 and terms[0].weight == 1.0, "the bench scores with one term"
        self.reward_fn = terms[0].fn

    def fresh_state(self) -> dict[str, Any]:
        """A new AdamW and the two generators, as the Trainer has them at step 0."""
        hp = self.hp
        optimizer = torch.optim.AdamW(
            self.trainer.parts.policy.parameters(),
            lr=hp.lr,
            betas=hp.betas,
            weight_decay=hp.weight_decay,
            foreach=hp.foreach,
        )
        device = self.trainer.parts.device
        return {
            "optimizer": optimizer,
            "sample_gen": torch.Generator(device=device).manual_seed(hp.seed + 1),
            "shuffle_gen": torch.Generator().manual_seed(hp.seed + 2),
            "optimizer_steps": 0,
        }


def token_logprobs(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
) -> Tensor:
    """``[N, R]`` logprobs of the response tokens (0 at padding)."""
    ids = torch.cat([prompt_ids, response_ids], 1)
    mask = torch.cat([prompt_mask, response_mask], 1)
    p, r = prompt_ids.shape[1], response_ids.shape[1]
    logits = model(ids, attention_mask=mask).logits[:, p - 1 : p + r - 1].float() / temperature
    logprobs = logits.log_softmax(-1).gather(-1, response_ids[..., None]).squeeze(-1)
    return logprobs.masked_fill(~response_mask, 0.0)


def token_mean(x: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1)


@torch.inference_mode()
def _forward_decode(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    cfg: SamplingConfig,
    eos_id: int,
    generator: torch.Generator,
) -> tuple[Tensor, Tensor, Tensor]:
    """Hand-written sampling: the model's ``forward`` with its KV cache, one token per step;
    (tokens, per-step "still running" mask columns, logprobs), each ``[N, steps]``."""
    n, p = prompt_ids.shape
    mask = torch.zeros(n, p + cfg.max_new_tokens, dtype=torch.bool, device=prompt_ids.device)
    mask[:, :p] = prompt_mask
    cache = model.new_cache(n, p + cfg.max_new_tokens)
    finished = torch.zeros(n, dtype=torch.bool, device=prompt_ids.device)
    tokens, logprobs, inputs = [], [], prompt_ids
    for t in range(cfg.max_new_tokens):
        logits = model(inputs, attention_mask=mask[:, : p + t], cache=cache).logits[:, -1].float()
        token = _choose(logits, cfg, generator)  # the sampler's draw: the same tokens
        tokens.append(token)
        logprobs.append(logits.log_softmax(-1).gather(-1, token[:, None]))
        finished |= token == eos_id
        if bool(finished.all()):
            break
        mask[:, p + t] = ~finished
        inputs = token[:, None]
    return torch.stack(tokens, 1), mask[:, p : p + len(tokens)].clone(), torch.cat(logprobs, 1)


def bare_generate(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    cfg: SamplingConfig,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator,
) -> Generation:
    """``_forward_decode`` as a ``Generation`` (right-padded with ``pad_id``; plain sampling
    at temperature 1 only, the default job's)."""
    assert (cfg.temperature, cfg.top_k, cfg.top_p) == (1.0, 0, 1.0), "plain sampling only"
    tokens, running, logprobs = _forward_decode(
        model, prompt_ids, prompt_mask, cfg, eos_id, generator
    )
    # a step counts for a row that had not finished before it
    response_mask = torch.ones_like(running)
    response_mask[:, 1:] = running[:, :-1]
    return Generation(
        tokens.masked_fill(~response_mask, pad_id),
        response_mask,
        logprobs.masked_fill(~response_mask, 0.0),
    )


def bare_rollout(loop: BareLoop, step: int, sample_gen: torch.Generator) -> dict[str, Tensor]:
    """Sample G responses per prompt with the policy, score them, pin reference logprobs and
    group-normalised advantages; every tensor ``[B * G, ...]``."""
    trainer, hp = loop.trainer, loop.hp
    tok, policy, g = trainer.parts.tokenizer, trainer.parts.policy, hp.group
    problems = trainer.parts.task.train_problems(hp.seed, step, hp.prompts)
    encoded = [tok.encode_prompt(p.prompt) for p in problems]
    width = max(map(len, encoded))
    prompt_ids = torch.tensor([[tok.pad_id] * (width - len(e)) + e for e in encoded])
    prompt_mask = torch.tensor([[False] * (width - len(e)) + [True] * len(e) for e in encoded])
    prompt_ids = prompt_ids.repeat_interleave(g, 0).to(trainer.parts.device)
    prompt_mask = prompt_mask.repeat_interleave(g, 0).to(trainer.parts.device)
    policy.eval()
    sample = generate if loop.decode == "sampler" else bare_generate
    gen = sample(policy, prompt_ids, prompt_mask, hp.sampling, tok.eos_id, tok.pad_id, sample_gen)
    policy.train()
    lengths = gen.response_mask.sum(-1).tolist()
    rows = zip(gen.response_ids.tolist(), lengths, strict=True)
    texts = [tok.decode(row[:n]) for row, n in rows]
    flat = [p for p in problems for _ in range(g)]
    scores = loop.reward_fn([p.text for p in flat], texts, [p.answer for p in flat])
    rewards = torch.tensor(scores, dtype=torch.float32).view(-1, g)
    mean, std = rewards.mean(-1, keepdim=True), rewards.std(-1, correction=0, keepdim=True)
    advantages = (rewards - mean) / (std + hp.adv_eps)
    constant = (rewards == rewards[:, :1]).all(-1, keepdim=True)  # no signal: exactly 0
    advantages = torch.where(constant, 0.0, advantages).view(-1, 1).to(trainer.parts.device)
    batch = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask}
    batch |= {"response_ids": gen.response_ids, "response_mask": gen.response_mask}
    with torch.inference_mode():
        ref = token_logprobs(trainer.parts.reference, **batch, temperature=hp.sampling.temperature)
    batch |= {"old_logprobs": gen.logprobs, "ref_logprobs": ref.clone()}
    batch["advantages"] = advantages * gen.response_mask
    batch["reward_mean"] = rewards.mean()
    return batch


def bare_loss(loop: BareLoop, part: dict[str, Tensor]) -> Tensor:
    """Clipped surrogate + ``kl_coef`` × k3 KL to the reference, token means."""
    hp, mask = loop.hp, part["response_mask"]
    inputs = ("prompt_ids", "prompt_mask", "response_ids", "response_mask")
    logprobs = token_logprobs(
        loop.trainer.parts.policy, *(part[k] for k in inputs), hp.sampling.temperature
    )
    ratio = torch.exp(logprobs - part["old_logprobs"])
    adv = part["advantages"]
    surrogate = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - hp.clip_eps, 1 + hp.clip_eps))
    log_r = (part["ref_logprobs"] - logprobs).clamp(-20.0, 20.0)
    kl = (torch.expm1(log_r) - log_r).clamp(min=0)
    return token_mean(surrogate, mask) + hp.kl_coef * token_mean(kl, mask)


def bare_step(loop: BareLoop, step: int, state: dict[str, Any]) -> dict[str, float]:
    """One RL step; ``state`` holds the optimizer, generators and optimizer-step count."""
    hp, optimizer = loop.hp, state["optimizer"]
    batch = bare_rollout(loop, step, state["sample_gen"])
    reward_mean = batch.pop("reward_mean")
    n, losses = batch["response_ids"].shape[0], []
    params = list(loop.trainer.parts.policy.parameters())
    for _ in range(hp.epochs):
        order = torch.randperm(n, generator=state["shuffle_gen"]).to(loop.trainer.parts.device)
        for rows in order.chunk(hp.minibatches):
            loss = bare_loss(loop, {k: v[rows] for k, v in batch.items()})
            loss.backward()
            nn.utils.clip_grad_norm_(params, hp.max_grad_norm)
            for group in optimizer.param_groups:
                group["lr"] = hp.learning_rate(state["optimizer_steps"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state["optimizer_steps"] += 1
            losses.append(loss.detach())
    return {"reward_mean": reward_mean.item(), "loss": torch.stack(losses).mean().item()}


def snapshot(trainer: Run) -> dict[str, Any]:
    """The Trainer's step-0 state: weights, optimizer, scheduler, generators."""
    return copy.deepcopy(
        {
            "policy": trainer.parts.policy.state_dict(),
            "optimizer": trainer.parts.optimizer.state_dict(),
            "scheduler": trainer.started.scheduler.state_dict(),
            "generators": {k: g.get_state() for k, g in trainer.started.state.generators.items()},
        }
    )


def restore(trainer: Run, start: dict[str, Any]) -> None:
    trainer.parts.policy.load_state_dict(start["policy"])
    trainer.parts.optimizer.load_state_dict(copy.deepcopy(start["optimizer"]))
    trainer.started.scheduler.load_state_dict(start["scheduler"])
    for name, generator in trainer.started.state.generators.items():
        generator.set_state(start["generators"][name])
    trainer.started.state.step = trainer.started.state.policy_version = 0


def time_astrai(trainer: Run, start: dict[str, Any], steps: int) -> tuple[float, float, dict]:
    """Seconds per ``train_step()`` call, its mean ``perf/step_s`` and the last metrics."""
    restore(trainer, start)
    t0, own = time.perf_counter(), 0.0
    for _ in range(steps):
        metrics = trainer.train_step()
        own += metrics["perf/step_s"]
    return (time.perf_counter() - t0) / steps, own / steps, metrics


def time_bare(loop: BareLoop, start: dict[str, Any], steps: int) -> tuple[float, dict]:
    """Seconds per bare step from the same start, and the last step's reward mean and loss."""
    loop.trainer.parts.policy.load_state_dict(start["policy"])
    state = loop.fresh_state()
    t0 = time.perf_counter()
    for step in range(steps):
        result = bare_step(loop, step, state)
    return (time.perf_counter() - t0) / steps, result


def check_same_math(trainer: Run, loop: BareLoop, start: dict[str, Any]) -> bool:
    """One step of each from the start state (also the warm-up): the weights must agree."""
    _, _, metrics = time_astrai(trainer, start, 1)
    astrai_weights = copy.deepcopy(trainer.parts.policy.state_dict())
    _, bare = time_bare(loop, start, 1)
    bare_weights = trainer.parts.policy.state_dict()
    diff = max((astrai_weights[k] - bare_weights[k]).abs().max().item() for k in bare_weights)
    moved = max((start["policy"][k] - bare_weights[k]).abs().max().item() for k in bare_weights)
    ok = diff <= WEIGHT_TOLERANCE and moved > 100 * WEIGHT_TOLERANCE
    print(
        f"math check: reward mean astrai {metrics['rollout/reward_mean']:.6f} bare "
        f"{bare['reward_mean']:.6f}; loss astrai {metrics['loss/total']:.6f} bare "
        f"{bare['loss']:.6f}; max |Δweight| {diff:.1e} (weights moved {moved:.1e}, "
        f"tolerance {WEIGHT_TOLERANCE:.0e}): {'ok' if ok else 'FAILED'}"
    )
    return ok


def build(args: argparse.Namespace, run_dir: str) -> tuple[Run, BareLoop]:
    overrides = [
        f"seed={args.seed}",
        f"train_type.prompts_per_step={args.prompts}",
        f"train_type.group_size={args.group}",
        "trainer.progress_bar=false",
        *args.override,  # the same job for both loops: the bare one takes the Trainer's reward
    ]
    cfg = compose_train_config(overrides)
    assert cfg.train_type._target_.endswith("GRPOStrategy"), "the bare loop is GRPO"
    hp = Hyper.from_config(cfg)
    trainer = Run(cfg, run_dir, job_context=([], {}))
    return trainer, BareLoop(trainer, hp, args.bare_decode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="paired rounds after the check")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--steps-per-round", type=int, default=1, help="steps of each per round")
    parser.add_argument("--prompts", type=int, default=64, help="train_type.prompts_per_step")
    parser.add_argument("--group", type=int, default=8, help="train_type.group_size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--bare-decode",
        choices=("forward", "sampler"),
        default="forward",
        help="the bare loop samples with the model's forward (a hand-written loop) or with "
        "astrai's sampler",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override of the job, repeatable (both loops run it; e.g. another reward: "
        "--override reward=custom --override reward._target_=module.fn)",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    args = parser.parse_args()
    if args.quick:  # the math check still runs; one round of timing
        args.rounds, args.prompts, args.group = 1, 8, 4
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, loop = build(args, run_dir)
        hp = loop.hp
        print(
            f"model: {trainer.parts.policy.num_parameters():,} parameters, "
            f"torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, {trainer.parts.device}"
        )
        print(
            f"workload: {hp.prompts} prompts x {hp.group} responses, "
            f"{hp.epochs} epochs x {hp.minibatches} minibatches, "
            f"{args.steps_per_round} step(s) per round; bare decode: {args.bare_decode}"
        )
        start = snapshot(trainer)
        if not check_same_math(trainer, loop, start):
            sys.exit("the two loops do not do the same math: no comparison")
        rows = []
        for r in range(args.rounds):  # alternating order: both see the same machine load
            if r % 2 == 0:
                astrai, own, _ = time_astrai(trainer, start, args.steps_per_round)
                bare, _ = time_bare(loop, start, args.steps_per_round)
            else:
                bare, _ = time_bare(loop, start, args.steps_per_round)
                astrai, own, _ = time_astrai(trainer, start, args.steps_per_round)
            rows.append((astrai, own, bare, astrai / bare))
            print(
                f"round {r + 1}: astrai {astrai:.3f}s (perf/step_s {own:.3f}s), "
                f"bare {bare:.3f}s, ratio {astrai / bare:.3f}"
            )
        trainer.started.logger.close()
    medians = [statistics.median(column) for column in zip(*rows, strict=True)]
    print(
        f"median: astrai {medians[0]:.3f}s (perf/step_s {medians[1]:.3f}s), bare {medians[2]:.3f}s"
    )
    print(f"ratio: {medians[3]:.3f}")


if __name__ == "__main__":
    main()
