"""Worker of the two-process evaluation test (importable by spawned children): greedy
evaluations of a tiny random policy whose reward depends only on each problem's answer, so the
global metrics can be worked out by hand."""

from __future__ import annotations

from pathlib import Path

import torch

# rank -> that rank's own problems' answers (uneven: 3 and 1)
OWN_ANSWERS = {0: ["1", "0", "h"], 1: ["1"]}
# the held-out list every rank holds, split by ``evaluate`` itself (ranks 0: #0 #2 #4, 1: #1 #3)
SHARED_ANSWERS = ["1", "0", "h", "0", "1"]
SCORES = {"1": 1.0, "h": 0.5}  # any other answer: 0.0


def score_by_answer(
    prompts: list[str], responses: list[str], answers: list[str | None]
) -> list[float]:
    return [SCORES.get(a or "", 0.0) for a in answers]


def evaluate_on_two_ranks(rank: int, world: int, out: str) -> None:
    """Rank 0 saves ``{"own": ..., "shared": ...}``: every rank's metrics, sample prompts and
    decoded batch sizes, for its own problems and for the shared list."""
    from astrai.distributed import gather_objects
    from astrai.models.llama import LlamaConfig, LlamaForCausalLM
    from astrai.models.tokenizer import CharTokenizer
    from astrai.rewards.base import Reward, RewardTerm
    from astrai.rollout.engines import engine
    from astrai.tasks.base import Problem
    from astrai.training import evaluation

    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{Path(out) / 'rendezvous'}", rank=rank, world_size=world
    )
    decoded: list[int] = []
    # evaluation decodes through the engine (engine=torch: rollout.engines.engine's generate)
    decode = engine.generate

    def recording(policy, ids, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        decoded.append(ids.shape[0])
        return decode(policy, ids, *args, **kwargs)

    engine.generate = recording
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig())
    reward = Reward([RewardTerm("by_answer", 1.0, score_by_answer)], accuracy_threshold=1.0)

    def problems(answers: list[str], first: int) -> list[Problem]:
        return [Problem(f"{first + i}+0=", a, f"{first + i}+0=") for i, a in enumerate(answers)]

    def run(batch: list[Problem], **kwargs: bool) -> dict[str, object]:
        decoded.clear()
        result = evaluation.evaluate(
            policy, CharTokenizer(), reward, batch, max_new_tokens=1, **kwargs
        )
        rows = list(decoded)
        return {
            "metrics": result.metrics(),
            "prompts": [s[0] for s in result.samples],
            "rows": rows,
        }

    results = {
        "shared": gather_objects(run(problems(SHARED_ANSWERS, 0))),
        "own": gather_objects(run(problems(OWN_ANSWERS[rank], 10 * rank), shard=False)),
    }
    if rank == 0:
        torch.save(results, Path(out) / "result.pt")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
