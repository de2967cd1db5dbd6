"""A user's own prompts on a pretrained model (``model=hf task=dataset``): every row is rendered
and encoded as the run will, before the run. A row the chat template cannot take, or one that
leaves the response no positions, is one config error naming the row, not a traceback at the
step that draws it (or a run that trains past the model's positions)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.helpers import compose_config
from tests.hf_models import save_tiny_hf_model

from astrai.config.validate import ConfigError


def rows_file(path: Path, prompts: list[object]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "answer": "3"}) + "\n" for p in prompts))
    return path


def dataset_job(model_dir: Path, train: Path, *extra: str) -> list[str]:
    return [
        "model=hf",
        f"model.path={model_dir}",
        "task=dataset",
        f"task.train_path={train}",
        f"task.eval_path={rows_file(train.with_name('eval.jsonl'), ['1+1='])}",
        "train_type.sampling.max_new_tokens=16",
        *extra,
    ]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model without a chat template (a base model): prompts are plain text; 128 positions."""
    return save_tiny_hf_model(tmp_path_factory.mktemp("base") / "model")


def test_chat_turns_on_a_model_without_a_chat_template_name_the_row(
    base_model: Path, tmp_path: Path
) -> None:
    turns = [{"role": "user", "content": "1+2="}]
    train = rows_file(tmp_path / "train.jsonl", ["1+2=", "2+1=", turns])
    with pytest.raises(ConfigError, match=re.escape(f"{train} row 3: chat messages need")):
        compose_config(dataset_job(base_model, train))
    plain = rows_file(tmp_path / "plain.jsonl", ["1+2=", "2+1="])
    compose_config(dataset_job(base_model, plain))  # validates
    # a system prompt makes every row chat turns
    with pytest.raises(ConfigError, match=re.escape(f"{plain} row 1: chat messages need")):
        compose_config(dataset_job(base_model, plain, "task.system_prompt='be brief'"))


def test_a_prompt_that_leaves_the_response_no_positions_names_the_row(
    base_model: Path, tmp_path: Path
) -> None:
    # the character tokenizer's HF form: one token per character, BOS added (no template)
    fits = "1+" * 55 + "1="  # 112 characters + BOS = 113 tokens; 113 + 16 > 128
    train = rows_file(tmp_path / "train.jsonl", ["1+2=", fits[:109] + "1=", fits])
    with pytest.raises(
        ConfigError,
        match=re.escape(f"{train} row 3: the prompt has 113 tokens; with ")
        + r".* allow 112 \(task.filter_overlong_prompts=true",
    ):
        compose_config(dataset_job(base_model, train))
    compose_config(dataset_job(base_model, train, "train_type.sampling.max_new_tokens=15"))


def test_a_chat_template_that_refuses_the_turns_names_the_row(tmp_path: Path) -> None:
    """A template's ``raise_exception`` (here: roles must alternate) is the row's error."""
    strict = (
        "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    model_dir = save_tiny_hf_model(tmp_path / "model")
    (model_dir / "chat_template.jinja").write_text(strict)
    ok = [{"role": "user", "content": "1+2="}]
    bad = [{"role": "user", "content": "1+"}, {"role": "user", "content": "2="}]
    train = rows_file(tmp_path / "train.jsonl", [ok, ok, bad])
    with pytest.raises(
        ConfigError,
        match=re.escape(f"{train} row 3: the chat template refuses these turns: roles must"),
    ):
        compose_config(dataset_job(model_dir, train))


def test_chat_template_kwargs_are_checked_before_the_run(base_model: Path, tmp_path: Path) -> None:
    """A key astrai passes itself, or options with no template to read them, are one line."""
    train = rows_file(tmp_path / "rows.jsonl", ["2+2="])
    job = dataset_job(base_model, train)
    with pytest.raises(ConfigError, match="model.chat_template_kwargs key 'messages' is set by"):
        compose_config([*job, "+model.chat_template_kwargs.messages=x"])
    # the tiny model's character tokenizer has no chat template: enable_thinking would be lost
    with pytest.raises(ConfigError, match="model.chat_template_kwargs .* nothing would read it"):
        compose_config([*job, "+model.chat_template_kwargs.enable_thinking=false"])


def test_a_template_that_renders_a_row_empty_names_the_row_and_the_template(
    base_model: Path, tmp_path: Path
) -> None:
    import shutil

    model = tmp_path / "templated"
    shutil.copytree(base_model, model)
    (model / "chat_template.jinja").write_text("{% for m in messages %}{% endfor %}")
    train = rows_file(tmp_path / "train.jsonl", ["1+2=", "2+1="])
    with pytest.raises(ConfigError) as caught:
        compose_config(dataset_job(model, train))
    message = str(caught.value)
    assert "row 1: the chat template renders the prompt as empty text" in message, message
    assert f"(model.path: {model / 'chat_template.jinja'}; model.chat_template=false" in message


def test_a_prompt_that_encodes_as_no_tokens_is_refused() -> None:
    """Whatever the tokenizer: an empty row would index an empty prompt in the sampler."""
    from astrai.tasks.prompt_fit import PromptRenderError, check_prompt_tokens

    with pytest.raises(PromptRenderError, match=r"^row 1: the prompt renders as no tokens$"):
        check_prompt_tokens([("", "row 1")], lambda prompt: [], 100)
