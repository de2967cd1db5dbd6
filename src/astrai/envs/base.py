"""What an environment is: built per episode from a task row, it opens the conversation and
answers each assistant turn (issue 50, part 1). The episode runner owns the tokens; an
environment sees and returns messages only.

    class Guess(Environment):
        def reset(self, row):                 # the opening messages
            self.target = row["target"]
            return [{"role": "user", "content": "Guess my number (1-100)."}]

        def step(self, turn):                 # the assistant's turn -> observations, reward
            guess = int(turn.content)
            if guess == self.target:
                return StepResult([], reward=1.0, done=True)
            hint = "higher" if guess < self.target else "lower"
            return StepResult([{"role": "user", "content": hint}])

``Environment`` is an abstract base class: a subclass without ``reset`` or ``step`` cannot be
built. ``envs.tools.ToolEnvironment`` is one, whose ``@tool`` methods are its ``tools``.

The episode runner (``rollout.episodes``) builds, resets and steps each episode's environment
in a slot of its own (``envs.hosts``: a worker process by default, killed at a timeout), within
the limits; an ``async def`` method is awaited on the slot's event loop, which outlives each
call (an ``asyncio`` object made in ``reset`` works in every later ``step``); what each method
returns is checked at the door (``envs.values``).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

from astrai.envs.tool_calls import ParsedTurn

Message = dict[str, Any]  # {"role": ..., "content": ...} as chat templates take them


@dataclass
class StepResult:
    """An environment's answer to one assistant turn.

    Attributes:
        observations: the messages that follow the turn (tool replies, the user's next words);
            rendered as observation tokens, never trained on.
        reward: this turn's reward, placed on the turn's last sampled token (the episode's
            reward sums its turns' and ``final_reward``).
        done: the episode ended (solved, failed, or the environment says so).
        truncated: the episode was cut short, not ended, as the runner cuts one at a limit
            (``max_turns``, ``max_episode_tokens``); out of the loss under
            ``train_type.mask_truncated``.
        metrics: numbers for ``env/<name>``, summed over the episode's turns and averaged over
            episodes (``solved`` decides the episode's accuracy).
    """

    observations: list[Message] = field(default_factory=list)
    reward: float = 0.0
    done: bool = False
    truncated: bool = False
    metrics: dict[str, float] = field(default_factory=dict)


class Environment(abc.ABC):
    """One episode's environment. Subclasses implement ``reset`` and ``step`` (abstract);
    ``final_reward`` (the episode's, on its last sampled token) and ``tools`` (OpenAI function
    schemas, see ``envs.tools.ToolEnvironment``) are optional."""

    # whether ``step`` reads the turn's tokens (``ParsedTurn.sampled``): the runner builds them
    # for such an environment only (an endpoint-backed one returns them to its client)
    reads_tokens: ClassVar[bool] = False

    @abc.abstractmethod
    def reset(self, row: dict[str, Any]) -> list[Message]:
        """The opening messages of the episode built from the task ``row``."""

    @abc.abstractmethod
    def step(self, turn: ParsedTurn) -> StepResult:
        """Answer the assistant's ``turn`` (its content and parsed tool calls)."""

    def final_reward(self) -> float:
        """The episode's reward once it is over (on top of the turns'); 0 by default."""
        return 0.0

    def tools(self) -> list[dict[str, Any]]:
        """The tools offered, as OpenAI function schemas; none by default."""
        return []
