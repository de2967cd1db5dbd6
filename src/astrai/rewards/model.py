"""A reward model: a Hugging Face sequence classifier that scores (prompt, response) pairs.

Contract: the seed project's ``score(prompts, responses) -> [B, G]`` (B prompts, G responses
each) reaches this module flattened: the trainer passes the B×G pairs as three equal lists
(each prompt once per response, the responses, the reference answers), gets ``B*G`` floats back
in the same order and reshapes them to ``[B, G]``. The reference answers are accepted (every
reward takes them) but not read: a reward model judges the response by itself. It also takes
``messages`` (``astrai.rewards.base.PROMPT_CONTEXT``): the whole conversation the policy
answered, so it scores the chat the policy saw (system turn and every turn), not the last user
turn alone.

The model directory is what ``save_pretrained`` writes for ``LlamaForSequenceClassification``
or ``Qwen2ForSequenceClassification`` with one label: ``config.json``, the trunk's weights
(``model.*``) and ``score.weight`` ``[1, hidden]`` (transformers' score head has no bias),
plus the tokenizer files. astrai's own trunk (``LlamaModel``, as the critic uses) computes it,
in float32 on the CPU until ``to`` moves it (float32 also in a bf16 run: the scoring turns
autocast off); ``transformers`` is not needed.

A pair becomes ids the way such a model is trained: with a chat template, the prompt's turns
(``messages``; without them, the prompt as one user turn) and the response as the assistant
turn, rendered without a generation prompt and encoded without the post-processor's special
tokens (the rendered text holds its own); without a chat template, ``prompt + response``
encoded with them (BOS where the model wants it). A model without a chat template cannot read
turns: a conversation that is more than one user turn (a system prompt, several turns) is a
ValueError naming the prompt, not a silent rendering of part of it.

The score is the head's output at the sequence's last token, exactly ``logits[:, 0]`` of
transformers' ``*ForSequenceClassification`` on the unpadded ids: its "last token" is the
rightmost one whose id is not ``config.json``'s ``pad_token_id`` (so a trailing pad id, e.g.
a pad that equals EOS, is skipped), or simply the last one when the config has no pad id.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from astrai.models.families import FAMILIES
from astrai.models.hf_tokenizer import HFTokenizer
from astrai.models.llama import LlamaConfig, LlamaModel
from astrai.models.pretrained import (
    CONFIG_FILE,
    ModelDirError,
    load_weights,
    read_hf_config,
    read_tensors,
    weight_files,
)
from astrai.models.saved_tokenizer import load_tokenizer
from astrai.models.tokenizer import CharTokenizer

# the one architecture per model_type a reward model directory may name
SEQUENCE_CLASSIFIERS = {
    name: family.architecture("ForSequenceClassification") for name, family in FAMILIES.items()
}
_NAMED_CHARS = 80  # how much of a prompt an error message quotes


class _SequenceClassifier(nn.Module):
    """astrai's trunk plus transformers' ``score`` head; parameter names are the checkpoint's
    (``model.*``, ``score.weight``), so its weights load one to one."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.model = LlamaModel(config)
        self.score = nn.Linear(config.hidden_size, 1, bias=False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, last: Tensor) -> Tensor:
        """``input_ids [N, T]``, ``attention_mask [N, T]`` bool, ``last [N]`` the column each
        row is scored at -> scores ``[N]``."""
        hidden = self.model(input_ids, attention_mask)  # [N, T, H]
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        # the head is per position, so scoring only the pooled row equals pooling its outputs
        return self.score(hidden[rows, last]).squeeze(-1)


def _labels(hf: dict) -> int:
    """The number of labels transformers builds the head with: ``num_labels``, else the size
    of ``id2label`` (what ``save_pretrained`` writes), else its default, 2."""
    if "num_labels" in hf:
        return int(hf["num_labels"])
    labels = hf.get("id2label")
    return len(labels) if isinstance(labels, dict) else 2


def _quote(prompt: str) -> str:
    text = prompt if len(prompt) <= _NAMED_CHARS else prompt[:_NAMED_CHARS] + "..."
    return repr(text)


class RewardModel:
    """Scores (prompt, response) pairs with a local Hugging Face sequence-classification model.

    Args:
        path: the model directory (config, safetensors weights, tokenizer files).
        batch_size: pairs per forward pass; each batch is left-padded to its longest pair.

    Loads on the CPU in float32, in eval mode, with gradients off. Every problem with the
    directory raises ``ModelDirError`` naming the file or directory.
    """

    # runs in the trainer's process, not a reward worker: it holds a torch module on the
    # training device (``Reward.to``); an inline term is not bounded by ``reward.timeout_s``
    inline = True

    def __init__(self, path: str, batch_size: int) -> None:
        if batch_size < 1:
            raise ValueError(f"reward model batch_size must be >= 1 (got {batch_size})")
        self.path = Path(path)
        self.batch_size = batch_size
        # first: the directory, config.json, and a Llama-family trunk astrai computes exactly
        self.config = read_hf_config(self.path)
        config_path = self.path / CONFIG_FILE
        hf = json.loads(config_path.read_text())  # read_hf_config parsed it already
        expected = SEQUENCE_CLASSIFIERS.get(hf["model_type"])
        architectures = hf.get("architectures") or []
        if expected is None or expected not in architectures:
            wanted = expected or " or ".join(SEQUENCE_CLASSIFIERS.values())
            raise ModelDirError(
                f"{config_path}: a reward model is a {wanted} (got architectures "
                f"{architectures}); a causal LM or token classifier has no sequence score"
            )
        if _labels(hf) != 1:
            raise ModelDirError(
                f"{config_path}: a reward model has 1 label (num_labels 1, one id2label entry); "
                f"got {_labels(hf)}"
            )
        self.pad_token_id: int | None = hf.get("pad_token_id")
        model = _SequenceClassifier(self.config)
        files = weight_files(self.path)
        load_weights(model, read_tensors(files), files[0] if len(files) == 1 else self.path)
        self.model = model.eval().requires_grad_(False)
        try:
            tokenizer = load_tokenizer(self.path)
        except (OSError, ValueError) as err:  # missing or invalid files; the message names them
            raise ModelDirError(str(err)) from err
        assert isinstance(tokenizer, HFTokenizer | CharTokenizer)  # the two load_tokenizer makes
        self.tokenizer = tokenizer

    def to(self, device: torch.device | str) -> RewardModel:
        """Move the model to ``device`` (batches are built there); returns ``self``."""
        self.model.to(device)
        return self

    def encode_pair(
        self, prompt: str, response: str, turns: Sequence[Mapping[str, str]] | None = None
    ) -> list[int]:
        """The ids the model scores for one pair (see the module docstring); ``turns``: the
        conversation the policy answered (None: ``prompt`` as one user turn)."""
        tokenizer = self.tokenizer
        if turns is None:
            turns = [{"role": "user", "content": prompt}]
        one_user_turn = len(turns) == 1 and turns[0]["role"] == "user"
        if isinstance(tokenizer, CharTokenizer) or tokenizer.chat_template is None:
            if not one_user_turn:
                roles = ", ".join(t["role"] for t in turns)
                raise ValueError(
                    f"reward model {self.path} has no chat template, so it cannot score the "
                    f"turns ({roles}) the policy answered on prompt {_quote(prompt)}"
                )
            # astrai's own: <bos> + characters; an HF one: BOS where the model wants it
            return tokenizer.encode(turns[0]["content"] + response)
        messages = [dict(t) for t in turns] + [{"role": "assistant", "content": response}]
        text = tokenizer.render_messages(messages, add_generation_prompt=False)
        return tokenizer.encode(text, add_special_tokens=False)  # the text holds its specials

    def _last_index(self, ids: list[int]) -> int:
        """Where transformers reads the score of unpadded ``ids``: the rightmost non-pad token
        (its ``argmax`` over ``index * non_pad`` gives 0 when every token is the pad id)."""
        if self.pad_token_id is None:
            return len(ids) - 1
        for index in range(len(ids) - 1, -1, -1):
            if ids[index] != self.pad_token_id:
                return index
        return 0

    def _left_pad(self, sequences: list[list[int]]) -> tuple[Tensor, Tensor, Tensor]:
        """Sequences -> ids ``[N, T]``, bool mask ``[N, T]``, scored column ``[N]``, on the
        model's device. Positions come from the mask (``LlamaModel``), so a padded row scores
        as it would alone; the fill id 0 is any valid row of the embedding, never attended."""
        device = self.model.score.weight.device
        width = max(len(s) for s in sequences)
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        mask = torch.zeros(len(sequences), width, dtype=torch.bool)
        last = torch.empty(len(sequences), dtype=torch.long)
        for row, seq in enumerate(sequences):
            offset = width - len(seq)
            ids[row, offset:] = torch.tensor(seq)
            mask[row, offset:] = True
            last[row] = offset + self._last_index(seq)
        return ids.to(device), mask.to(device), last.to(device)

    def __call__(
        self,
        prompts: list[str],
        responses: list[str],
        answers: list[str | None],
        messages: list[list[dict[str, str]]] | None = None,
    ) -> list[float]:
        """One float32 score per pair, as Python floats, in the order given (``len(prompts)``).

        ``messages``: each pair's conversation (the run passes it: ``PROMPT_CONTEXT``); None
        scores each prompt as one user turn.

        Raises ValueError when the lists differ in length, a pair is longer than the model's
        ``max_position_embeddings``, or its turns need a chat template the model lacks (naming
        its prompt).
        """
        turns: list[list[dict[str, str]] | None] = [None] * len(prompts)
        if messages is not None:
            turns = list(messages)
        if not len(prompts) == len(responses) == len(answers) == len(turns):
            raise ValueError(
                f"reward model: {len(prompts)} prompts, {len(responses)} responses, "
                f"{len(answers)} answers and {len(turns)} messages; expected one of each per pair"
            )
        encoded = [
            self.encode_pair(p, r, t) for p, r, t in zip(prompts, responses, turns, strict=True)
        ]
        limit = self.config.max_position_embeddings
        for prompt, pair_ids in zip(prompts, encoded, strict=True):
            if not pair_ids:
                raise ValueError(
                    f"reward model {self.path}: prompt {_quote(prompt)} with its "
                    "response encodes to no tokens"
                )
            if len(pair_ids) > limit:
                raise ValueError(
                    f"reward model {self.path}: prompt {_quote(prompt)} with its response is "
                    f"{len(pair_ids)} tokens, more than the model's max_position_embeddings {limit}"
                )
        # batch pairs of similar length together: less padding, same scores
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        scores = [0.0] * len(encoded)
        device_type = self.model.score.weight.device.type
        # float32 also inside a bf16 run's autocast (the trainer samples under it): bf16 keeps
        # about 3 significant digits, so close scores would tie within a group
        with torch.inference_mode(), torch.autocast(device_type, enabled=False):
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                ids, mask, last = self._left_pad([encoded[i] for i in rows])
                values = self.model(ids, mask, last).float().tolist()
                for i, value in zip(rows, values, strict=True):
                    scores[i] = value
        return scores
