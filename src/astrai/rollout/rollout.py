"""The ``Rollout``: one step's prompts, sampled responses and pinned training targets."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor


@dataclass
class Rollout:
    """Everything a strategy needs from one round of sampling.

    Shapes: B prompts × G responses each × R response tokens, P prompt tokens.

    Attributes:
        prompt_ids, prompt_mask: ``[B, P]`` left-padded prompts (mask True on real tokens).
        response_ids, response_mask: ``[B, G, R]`` right-padded responses; EOS is included.
        logprobs: ``[B, G, R]`` behaviour logprobs recorded while sampling.
        rewards: ``[B, G]`` task reward per response (lands on the last response token).
        policy_version: optimizer steps the sampling policy had taken.
        prompts, responses: texts for logging (``responses[b][g]``).
        reward_terms: ``[B, G]`` scores of each named reward term (``rewards`` is their
            weighted sum), for the ``reward/<name>`` metrics.
        ref_logprobs, values, advantages, returns: ``[B, G, R]`` targets filled once by
            ``Strategy.prepare`` and then pinned for every replayed gradient step.
        loss_mask: ``[B, G, R]`` the tokens the losses count when it differs from
            ``response_mask`` (``train_type.mask_truncated``); None = ``response_mask``.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    logprobs: Tensor
    rewards: Tensor
    policy_version: int
    prompts: list[str] = field(default_factory=list)
    responses: list[list[str]] = field(default_factory=list)
    reward_terms: dict[str, Tensor] = field(default_factory=dict)
    ref_logprobs: Tensor | None = None
    values: Tensor | None = None
    advantages: Tensor | None = None
    returns: Tensor | None = None
    loss_mask: Tensor | None = None

    def select(self, rows: slice) -> Rollout:
        """The prompts ``rows`` (whole groups) with their responses and any pinned targets."""
        tensors = {
            name: (value[rows] if value is not None else None)
            for name in (
                "prompt_ids",
                "prompt_mask",
                "response_ids",
                "response_mask",
                "logprobs",
                "rewards",
                "ref_logprobs",
                "values",
                "advantages",
                "returns",
                "loss_mask",
            )
            for value in (getattr(self, name),)
        }
        return Rollout(
            policy_version=self.policy_version,
            prompts=self.prompts[rows],
            responses=self.responses[rows],
            reward_terms={name: scores[rows] for name, scores in self.reward_terms.items()},
            **tensors,  # type: ignore[arg-type]
        )

    @property
    def num_prompts(self) -> int:
        return self.response_ids.shape[0]

    @property
    def group_size(self) -> int:
        return self.response_ids.shape[1]

    def flat_prompts(self) -> tuple[Tensor, Tensor]:
        """Prompts repeated per response: ``[B * G, P]`` ids and mask."""
        g = self.group_size
        return self.prompt_ids.repeat_interleave(g, 0), self.prompt_mask.repeat_interleave(g, 0)

    def flat(self, name: str) -> Tensor:
        """A ``[B, G, ...]`` field as ``[B * G, ...]``."""
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"rollout field {name!r} has not been prepared")
        return value.flatten(0, 1)
