"""The reward model, checked against ``transformers``' own sequence classifiers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers  # the hf extra; `make test` installs it
from safetensors.torch import load_file, save_file
from tests.hf_models import (
    CLASS_PREFIX,
    FAMILY_KWARGS,
    TINY,
    save_tiny_hf_model,
    save_with_char_tokenizer,
)

from astrai.models.pretrained import ModelDirError
from astrai.rewards.model import RewardModel

# 7 pairs of different lengths: with batch_size 3, three batches, each padded. The last
# response ends with the pad id (0 = "<pad>"), which transformers skips when it picks the
# last token: the score is read one token earlier.
PROMPTS = ["3+4=", "12+9=", "reverse: abc=", "7+7=", "sort: edcba=", "1+1=", "what is 5*6?"]
RESPONSES = ["7", "21", "cba", "fourteen", "abcde", " 2 .", "30<pad>"]
ANSWERS: list[str | None] = ["7", "21", "cba", "14", "abcde", "2", None]
# uses bos_token / eos_token and the role names; every character is in the char alphabet
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'][0] }}: {{ m['content'] }}"
    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}a: {% endif %}"
)


def _save_classifier(
    directory: Path, family: str = "llama", num_labels: int = 1, template: str | None = None
) -> Path:
    """``save_pretrained`` of a random ``*ForSequenceClassification`` of ``family``
    (``tests.hf_models.FAMILY_KWARGS``; biases and q/k norms drawn away from their init, so a
    dropped one shows) plus the character tokenizer's HF form."""
    torch.manual_seed(0)
    kwargs = dict(TINY, initializer_range=0.2, rope_theta=5e5, num_labels=num_labels)
    kwargs.update(FAMILY_KWARGS[family])
    prefix = CLASS_PREFIX[family]
    config = getattr(transformers, f"{prefix}Config")(**kwargs)
    model = getattr(transformers, f"{prefix}ForSequenceClassification")(config)
    save_with_char_tokenizer(model, directory)
    if template is not None:
        (directory / "chat_template.jinja").write_text(template)
    return directory


def _reference(directory: Path, sequences: list[list[int]]) -> list[float]:
    """transformers' ``logits[:, 0]``, one unpadded sequence at a time."""
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(directory))
    with torch.no_grad():
        return [model(input_ids=torch.tensor([ids])).logits[0, 0].item() for ids in sequences]


def _check_scores(directory: Path, sequences: list[list[int]]) -> None:
    ours = RewardModel(str(directory), batch_size=3)
    assert ours.to("cpu") is ours
    assert [ours.encode_pair(p, r) for p, r in zip(PROMPTS, RESPONSES, strict=True)] == sequences
    assert len({len(s) for s in sequences}) == len(sequences)  # all lengths differ: padding
    scores = ours(PROMPTS, RESPONSES, ANSWERS)
    reference = _reference(directory, sequences)
    assert all(isinstance(s, float) for s in scores) and len(scores) == len(PROMPTS)
    assert max(reference) - min(reference) > 0.1  # scores differ: a mixed-up row would show
    assert scores == pytest.approx(reference, abs=1e-5, rel=0)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "llama3"])
def test_scores_equal_transformers_without_chat_template(tmp_path: Path, family: str) -> None:
    directory = _save_classifier(tmp_path, family)
    # not AutoTokenizer: for a qwen2 directory transformers 5 picks Qwen2Tokenizer, which
    # replaces tokenizer.json's pre-tokenizer with Qwen2's byte-level one and drops the char
    # tokenizer's spaces; the fast-tokenizer class reads tokenizer.json as it is, like astrai
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(str(directory))
    # no template: prompt + response with the post-processor's <bos>
    sequences = [tokenizer(p + r).input_ids for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    assert all(ids[0] == 1 for ids in sequences) and sequences[-1][-1] == 0
    _check_scores(directory, sequences)


def test_scores_equal_transformers_with_chat_template(tmp_path: Path) -> None:
    directory = _save_classifier(tmp_path, template=TEMPLATE)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    sequences = []
    for prompt, response in zip(PROMPTS, RESPONSES, strict=True):
        messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        assert text == f"<bos>u: {prompt}<eos>a: {response}<eos>"
        sequences.append(tokenizer(text, add_special_tokens=False).input_ids)
    _check_scores(directory, sequences)


def test_qwen2_biases_are_loaded(tmp_path: Path) -> None:
    ours = RewardModel(str(_save_classifier(tmp_path, "qwen2")), batch_size=2)
    bias = ours.model.model.layers[1].self_attn.k_proj.bias
    assert bias is not None and bias.abs().max() > 0.1


def test_a_pair_longer_than_the_model_is_refused(tmp_path: Path) -> None:
    ours = RewardModel(str(_save_classifier(tmp_path)), batch_size=2)
    long_prompt = "1+" * 70  # 141 tokens with <bos> > max_position_embeddings 128
    with pytest.raises(ValueError, match=r"prompt '1\+1\+.*max_position_embeddings 128"):
        ours(["1+1=", long_prompt], ["2", "3"], [None, None])
    with pytest.raises(ValueError, match="2 prompts, 1 responses"):
        ours(["1+1=", "2+2="], ["2"], [None, None])
    assert ours([], [], []) == []


def _without_score_weight(directory: Path) -> None:
    weights = directory / "model.safetensors"
    tensors = load_file(str(weights))
    del tensors["score.weight"]
    save_file(tensors, str(weights), metadata={"format": "pt"})


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("causal_lm", r"config\.json: a reward model is a LlamaForSequenceClassification"),
        ("two_labels", r"config\.json: a reward model has 1 label .*got 2"),
        ("missing_dir", "no model directory at"),
        ("missing_score", r"model\.safetensors: weights do not match .*score\.weight"),
    ],
)
def test_directory_problems_name_the_path(tmp_path: Path, case: str, message: str) -> None:
    directory = tmp_path / case
    if case == "causal_lm":
        save_tiny_hf_model(directory)
    elif case == "two_labels":
        _save_classifier(directory, num_labels=2)
    elif case == "missing_score":
        _without_score_weight(_save_classifier(directory))
    with pytest.raises(ModelDirError, match=message) as info:
        RewardModel(str(directory), batch_size=4)
    assert str(directory) in str(info.value)


@pytest.mark.slow  # ~8 s: a trainer and two model loads
def test_a_run_scores_its_rollouts_with_the_reward_model(tmp_path: Path) -> None:
    """`reward=model reward.path=...` through the trainer: every sampled response's reward is
    the model's score of its (prompt, response) pair, logged as reward/reward_model."""
    from tests.helpers import compose_config

    from astrai.training.run import Run

    directory = _save_classifier(tmp_path / "rm")
    cfg = compose_config(["debug=quick", "reward=model", f"reward.path={directory}"])
    trainer = Run(cfg, tmp_path / "run")
    rollout = trainer.trainer.rollout()
    pairs = zip(rollout.prompts, rollout.responses, strict=True)
    prompts = [p for p, group in pairs for _ in group]
    responses = [r for group in rollout.responses for r in group]
    expected = RewardModel(str(directory), batch_size=64)(prompts, responses, [None] * len(prompts))
    assert rollout.rewards.flatten().tolist() == pytest.approx(expected, abs=1e-6)
    assert list(rollout.reward_terms) == ["reward_model"]
    assert max(expected) - min(expected) > 0  # the responses differ, and so do their scores


def test_scores_stay_float32_inside_a_bf16_run(tmp_path: Path) -> None:
    """The trainer samples and evaluates under its bf16 autocast; the reward model's scores
    must not be rounded by it (bf16 keeps about 3 significant digits, so close scores would
    tie within a group)."""
    ours = RewardModel(str(_save_classifier(tmp_path)), batch_size=3)
    plain = ours(PROMPTS, RESPONSES, ANSWERS)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = ours(PROMPTS, RESPONSES, ANSWERS)
        rounded = ours.model(*ours._left_pad([ours.encode_pair("3+4=", "7")]))
    assert inside == plain
    # the check can fail: under the autocast the bare model's score is not float32's
    assert rounded.item() != plain[0]


def test_the_reward_model_scores_the_chat_the_policy_saw(tmp_path: Path) -> None:
    """With a system turn and earlier turns, the pair the model scores is the whole
    conversation plus the response (as transformers renders it), not the last user turn."""
    from astrai.rewards.base import Reward, RewardTerm
    from astrai.rollout.collect import score_responses
    from astrai.tasks.base import Problem

    directory = _save_classifier(tmp_path, template=TEMPLATE)
    turns = (
        {"role": "system", "content": "be brief."},
        {"role": "user", "content": "2+2=?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+4=?"},
    )
    problems = [Problem(turns, "7", "3+4=?"), Problem("1+1=", "2", "1+1=")]
    responses = [["7", "8"], ["2", "3"]]
    rm = RewardModel(str(directory), batch_size=2)
    reward = Reward([RewardTerm("rm", 1.0, rm)], 1.0)
    rewards, _ = score_responses(reward, problems, responses)

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    sequences = []
    conversations = [list(turns), [{"role": "user", "content": "1+1="}]]
    for conversation, group in zip(conversations, responses, strict=True):
        for response in group:
            chat = [*conversation, {"role": "assistant", "content": response}]
            text = tokenizer.apply_chat_template(chat, tokenize=False)
            sequences.append(tokenizer(text, add_special_tokens=False).input_ids)
    assert tokenizer.decode(sequences[0]).startswith("<bos>s: be brief.<eos>u: 2+2=?<eos>a: 4")
    scores = rewards.flatten().tolist()
    assert scores == pytest.approx(_reference(directory, sequences), abs=1e-5, rel=0)
    # the last user turn alone is another chat, with another score
    alone = rm(["3+4=?"], ["7"], [None])
    assert abs(alone[0] - scores[0]) > 1e-3
    assert reward.takes == ("messages",)


def test_a_reward_model_without_chat_template_refuses_turns(tmp_path: Path) -> None:
    rm = RewardModel(str(_save_classifier(tmp_path)), batch_size=2)
    one_turn = [[{"role": "user", "content": "1+1="}]]
    assert rm(["1+1="], ["2"], [None], messages=one_turn) == rm(["1+1="], ["2"], [None])
    turns = [[{"role": "system", "content": "be brief."}, {"role": "user", "content": "1+1="}]]
    with pytest.raises(
        ValueError,
        match=r"has no chat template, so it cannot score the turns "
        r"\(system, user\) the policy answered on prompt '1\+1='",
    ):
        rm(["1+1="], ["2"], [None], messages=turns)
