"""An embedded task (``task=addition``, the default) on a pretrained model (``model=hf``): its
prompts go through the model's chat template. The first ones the run renders (every eval
prompt, step 0's training prompts) are rendered and encoded before the run, so a template that
raises on them is one config error naming the template's file, not a traceback at step 0."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config

from astrai.config.validate import ConfigError
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import CharTokenizer

NEEDS_SYSTEM = (  # a template that insists on a system turn, which the embedded tasks lack
    "{% if messages[0]['role'] != 'system' %}"
    "{{ raise_exception('a system turn is required') }}{% endif %}"
    "{% for m in messages %}{{ m['content'] }}{% endfor %}"
)
PLAIN = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model directory without a chat template (astrai's own writer: no transformers)."""
    torch.manual_seed(0)
    config = LlamaConfig(
        num_hidden_layers=1,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    directory = tmp_path_factory.mktemp("base") / "model"
    directory.mkdir()
    save_policy_dir(LlamaForCausalLM(config), CharTokenizer(), directory)
    return directory


def with_template(base: Path, directory: Path, template: str, in_config: bool = False) -> Path:
    """A copy of ``base`` whose chat template is ``template``: in ``chat_template.jinja``, or
    (``in_config``) in ``tokenizer_config.json`` as older models keep it."""
    shutil.copytree(base, directory)
    if in_config:
        config_file = directory / "tokenizer_config.json"
        config = json.loads(config_file.read_text())
        config_file.write_text(json.dumps({**config, "chat_template": template}))
    else:
        (directory / "chat_template.jinja").write_text(template)
    return directory


def job(model_dir: Path, *extra: str) -> list[str]:
    return ["model=hf", f"model.path={model_dir}", "train_type.sampling.max_new_tokens=8", *extra]


@pytest.mark.parametrize(
    "in_config", [False, True], ids=["chat_template.jinja", "tokenizer_config"]
)
def test_a_template_that_refuses_the_task_prompts_names_its_file(
    base_model: Path, tmp_path: Path, in_config: bool
) -> None:
    model_dir = with_template(base_model, tmp_path / "model", NEEDS_SYSTEM, in_config)
    source = model_dir / ("tokenizer_config.json" if in_config else "chat_template.jinja")
    with pytest.raises(ConfigError) as caught:
        compose_config(job(model_dir))
    message = str(caught.value)
    assert message.startswith(f"model.path: {source}: task=addition: the eval prompt ")
    assert "the chat template refuses these turns: a system turn is required" in message
    assert "model.chat_template=false" in message
    assert "\n" not in message
    # without the template the prompts are plain text: the same job validates
    compose_config(job(model_dir, "model.chat_template=false"))


def test_a_template_that_fails_with_its_own_error_is_one_line_too(
    base_model: Path, tmp_path: Path
) -> None:
    """Not the template's ``raise_exception``: Python's own error inside the template."""
    model_dir = with_template(base_model, tmp_path / "model", "{{ 1 // 0 }}" + PLAIN)
    with pytest.raises(
        ConfigError,
        match=re.escape(f"model.path: {model_dir / 'chat_template.jinja'}: task=addition: ")
        + ".*the chat template fails on these turns: ZeroDivisionError",
    ):
        compose_config(job(model_dir))


def test_the_training_prompts_are_rendered_too(base_model: Path, tmp_path: Path) -> None:
    """A template that refuses one training prompt of step 0 (``task=reverse``'s prompts
    differ from its eval prompts) but none of the eval prompts."""
    from hydra.utils import instantiate

    cfg = compose_config(job(base_model, "task=reverse"))
    task = instantiate(cfg.task)
    evals = {p.text for p in task.eval_problems(cfg.trainer.eval_prompts)}
    first = next(
        p.text
        for p in task.train_problems(cfg.seed, 0, cfg.train_type.prompts_per_step)
        if p.text not in evals
    )
    refuse_one = (
        f"{{% if messages[0]['content'] == {first!r} %}}"
        "{{ raise_exception('not this one') }}{% endif %}" + PLAIN
    )
    model_dir = with_template(base_model, tmp_path / "model", refuse_one)
    with pytest.raises(
        ConfigError, match=re.escape(f"task=reverse: the training prompt {first!r}: the chat")
    ):
        compose_config(job(model_dir, "task=reverse"))


def test_a_template_that_leaves_no_room_for_the_response_names_the_prompt(
    base_model: Path, tmp_path: Path
) -> None:
    # 60 characters before each prompt: 60 + "d+d=" > 64 positions - 8 new tokens
    model_dir = with_template(base_model, tmp_path / "model", "1" * 60 + PLAIN)
    with pytest.raises(
        ConfigError,
        match=r"^task=addition: the eval prompt '\d\+\d=': the prompt has 6\d tokens; .* allow 56$",
    ):
        compose_config(job(model_dir))
    with_template(base_model, tmp_path / "fits", "1" * 40 + PLAIN)
    compose_config(job(tmp_path / "fits"))


EMPTY = "{% for m in messages %}{% endfor %}"  # renders nothing
NO_CONTENT = "{% for m in messages %}q: {% endfor %}a:"  # renders the turns without their text


@pytest.mark.parametrize(
    ("template", "why"),
    [
        (EMPTY, "the chat template renders the prompt as empty text"),
        (NO_CONTENT, "the chat template renders the prompt without its user text"),
    ],
    ids=["empty", "no_content"],
)
def test_a_template_that_renders_an_empty_or_contentless_prompt_names_its_file(
    base_model: Path, tmp_path: Path, template: str, why: str
) -> None:
    """Such a template used to pass the pre-run check and fail after the banner (an empty
    prompt: a 68-line traceback); refused before the run, in one line naming the file."""
    model_dir = with_template(base_model, tmp_path / "model", template)
    with pytest.raises(ConfigError) as caught:
        compose_config(job(model_dir))
    message = str(caught.value)
    prefix = f"model.path: {model_dir / 'chat_template.jinja'}: task=addition: the eval prompt "
    assert message.startswith(prefix), message
    assert why in message and "\n" not in message
    compose_config(job(model_dir, "model.chat_template=false"))  # the prompts as plain text


def test_an_empty_template_is_exit_2_in_one_line_and_no_run_dir(
    base_model: Path, tmp_path: Path
) -> None:
    from tests.train_runs import run_train_in_process

    model_dir = with_template(base_model, tmp_path / "model", EMPTY)
    run_dir = tmp_path / "run"
    result = run_train_in_process([*job(model_dir), f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"astrai: config error: model.path: {model_dir}/chat_template.jinja")
    assert not run_dir.exists()
