"""Which rollout samples a step logs (``samples/rollout``: TensorBoard's text panel, a W&B
table), and in what form.

Every ``logger.samples_every`` steps, the first response of each prompt. An episode run
(``env=...``) logs from step 1 as well, so a run of a few steps shows what its episodes looked
like (issue 58: a new user's two steps of a chat model that never called its tool showed
nothing), and each response is the whole episode as the model saw it
(``rollout.episodes.view``): its opening (the system message, the tools) and every turn,
special tokens kept, the sampled tokens in ``[[`` ``]]``, on one line (``\\n`` for a newline:
one row of the panel's table).
"""

from __future__ import annotations

from omegaconf import DictConfig

from astrai.models.tokenizer import Tokenizer
from astrai.rollout.episodes.view import one_line, rollout_view
from astrai.rollout.rollout import Rollout
from astrai.training.rollout_stats import rollout_samples

FIRST_STEP = 1  # an episode run's first logged samples


def logged_samples(
    rollout: Rollout, step: int, logger: DictConfig, tokenizer: Tokenizer
) -> list[tuple[str, str, float]] | None:
    """(prompt, response, reward) of the first response of each prompt to log at ``step``
    (the one the rollout trains), None when the step logs none (module docstring);
    ``logger``: the run's ``logger`` node (``samples_every``)."""
    episodes = rollout.sampled_mask is not None
    if step % int(logger.samples_every) != 0 and not (episodes and step == FIRST_STEP):
        return None
    if not episodes:
        return rollout_samples(rollout)
    return [
        (
            one_line(text),
            one_line(rollout_view(tokenizer, rollout, b, 0)),
            float(rollout.rewards[b, 0]),
        )
        for b, text in enumerate(rollout.prompts)
    ]
