"""The default jobs are bitwise what they were before issue 19's algorithm options: a 3-step
GRPO and PPO run's final weights against digests recorded with the code before that change
(commit f9fd9d5, torch 2.13.0 CPU, one intra-op thread).

Bitwise results depend on the CPU: torch's CPU build picks its matmul and vector kernels by
processor (MKL takes other code paths on AMD than on Intel; ATen by ISA), so the same code gives
other weights on another kind of machine. Each digest is recorded per kind of machine these
tests run on, with the code before the change (the one on an AMD EPYC was made on 2026-12-02 by
running this test on commit 2972daf, whose code gives the first digest on the other machine; the
AVX2 one on 2026-12-03 the same way: 2972daf's own test there gave exactly these).

PPO's default job changed once on purpose since (issue 32: the critic's learning rate follows
the policy's schedule instead of staying constant); its digest is of the job with the critic's
old constant schedule (``critic.scheduler=null``), every other line of the code path the
default's. ``tests/training/test_critic_schedule.py`` checks the new default's rates.

GRPO's default job changed on purpose in issue 59: the reference is scored through the update's
own forwards (whole sequences, the update's micro-batches: ``algorithms.pass_plan``) instead
of the shared-prompt cache, so that a KL to the reference reads exactly 0 at step 1 in every
precision; in fp32 its logprobs move by up to 4.8e-7. Its digest is of the job with the
reference scored the old way (``cached_reference``, the pre-issue-59 code of
``Strategy.score_reference``), every other line of the code path the default's.
``tests/training/test_one_numerical_path.py`` checks the new path. PPO's default job gives its
recorded digest through the new path as it is."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config, weights_digest

from astrai.algorithms.masked import local_sum
from astrai.algorithms.strategy import Strategy, kl_metrics
from astrai.models.scoring import response_logprobs, score_in_parts
from astrai.training.run import Run

SMALL = [
    "debug=quick",
    "trainer.total_steps=3",
    "trainer.eval_every=3",
    "train_type.prompts_per_step=4",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "logger.tensorboard=false",
]

# sha256 of every parameter's bytes (state_dict order), recorded before the change, per machine
DIGESTS = {
    "online_grpo": {
        "afb5d0d3d3e396c9553b0a0271159ca7a11708051b60488a6607258e629f535f": "CI, 2026-12-01",
        "9341d03f7ddc1c6744104275d9940d185e69e9a81d78ec68f155b5531a14a4f7": "AMD EPYC, AVX-512",
        "c1df0ec62a5ef33b56a08d8339d18b05c6cefe58aa47d2b196cb31afb5139270": "AMD EPYC, AVX2",
    },
    "online_ppo": {
        "043ed3dfc99a17027bf4b790239843c0a367dbca10bfff1349999d0f364c731b": "CI, 2026-12-01",
        "37d64f78900c99fabc05c1bcb79b8f05e2926b02460ba733c6abe9f6525d2703": "AMD EPYC, AVX-512",
        "0a8dc0aaea67cfec7212f700aa0d81eca1ce232e3157c314739afd111538c085": "AMD EPYC, AVX2",
    },
}


def cpu_name() -> str:
    """The processor's model name (Linux), for the failure message of a new kind of machine."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown CPU"
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else "unknown CPU"


# what the recorded digests' code did, where a default changed on purpose since
BEFORE = {"online_grpo": [], "online_ppo": ["critic.scheduler=null"]}


def cached_reference(self, rollout, reference, passes, sum_over_ranks=local_sum, no_grad=None):  # noqa: ANN001, ANN201, ARG001
    """``score_reference`` as the recorded digests' code ran it (before issue 59): the
    reference through the shared-prompt cache, in the scoring passes of ``score_tokens``."""
    prompt_ids, prompt_mask = rollout.flat_prompts()
    temperature = self.sampling.temperature

    def score(ids, mask, response_ids, response_mask, by_length):  # noqa: ANN001, ANN202
        return response_logprobs(
            reference, ids, mask, response_ids, response_mask, temperature,
            share_prompts=True, by_length=by_length,
        )[0]  # fmt: skip

    with torch.inference_mode():
        scored = score_in_parts(
            score,
            passes.scoring_parts(reference, rollout, prompt_mask, by_length=False),
            prompt_ids,
            prompt_mask,
            rollout.flat("response_ids"),
            rollout.flat("response_mask"),
        )
    rollout.ref_logprobs = scored.clone().view_as(rollout.logprobs)
    return kl_metrics(rollout, sum_over_ranks)


def run_digest(train_type: str, run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    overrides = [f"train_type={train_type}", *SMALL, *BEFORE[train_type]]
    if train_type == "online_grpo":  # PPO's digest is the same through either path
        monkeypatch.setattr(Strategy, "score_reference", cached_reference)
    trainer = Run(compose_config(overrides), run_dir)
    trainer.fit()
    models = [trainer.parts.policy] + (
        [trainer.parts.critic] if trainer.parts.critic is not None else []
    )
    return weights_digest(*models)


@pytest.mark.parametrize("train_type", sorted(DIGESTS))
def test_default_job_weights_are_bitwise_unchanged(
    train_type: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert torch.get_num_threads() == 1  # tests/conftest.py: the digests were made with one
    digest = run_digest(train_type, tmp_path, monkeypatch)
    assert digest in DIGESTS[train_type], (
        f"{train_type}: {digest} on {cpu_name()}, torch CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}: not a recorded digest. On a kind of machine "
        "not listed, record the digest the code before the change gives there; otherwise the "
        "default job's math changed"
    )
