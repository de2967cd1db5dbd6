"""Cross-field checks that run before any work: one clear message naming the key."""

from __future__ import annotations

from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from astrai.config.container_paths import NotInContainer, container_view
from astrai.config.devices import Where
from astrai.config.distill_checks import check_routes, validate_distill
from astrai.config.duration import parse_duration
from astrai.config.engine_checks import configured_engine, validate_engine
from astrai.config.env_checks import validate_env
from astrai.config.errors import ConfigError, require
from astrai.config.infra_checks import plan_here, validate_infra
from astrai.config.keys import check_known_keys
from astrai.config.lag_checks import record_lag_plan, validate_policy_lag
from astrai.config.logger_checks import validate_logger_backends
from astrai.config.lora_checks import validate_lora
from astrai.config.ranges import (
    LARGE_KEY,
    MAX_EVAL_PROMPTS,
    MAX_PARAMETERS,
    MAX_SEED,
    check_large,
    check_number,
)
from astrai.config.role_checks import check_roles, validate_teacher
from astrai.config.stop_at_checks import validate_stop_at
from astrai.config.train_type_checks import check_world_batch, validate_train_type
from astrai.models.llama import LlamaConfig
from astrai.models.tokenizer import CharTokenizer, Tokenizer
from astrai.tasks.base import ProblemSource

# ``ckpt.resume_schedule``: what a resume with another trainer.total_steps does to the LR
# schedules (``training.trainer``)
RESUME_SCHEDULES = ("rescale", "keep")


def _validate_pretrained(model: DictConfig) -> tuple[LlamaConfig, Tokenizer]:
    """``model=hf``: the directory, its config and its tokenizer files are checked (the
    weights are read by the trainer)."""
    from astrai.models.hf_tokenizer import TokenizerFileError, check_template_kwargs
    from astrai.models.pretrained import (
        ModelDirError,
        check_tokenizer_fits,
        check_weight_shapes,
        read_hf_config,
        template_kwargs_of,
        tokenizer_for,
        weight_files,
    )

    path = None if OmegaConf.is_missing(model, "path") else model.path
    require(
        isinstance(path, str) and path.strip() != "",
        "model.path must name a local Hugging Face model directory (model=hf model.path=<dir>)",
    )
    assert isinstance(path, str)
    template_kwargs = template_kwargs_of(model)
    try:
        check_template_kwargs(template_kwargs)
    except ValueError as err:
        raise ConfigError(f"model.{err}") from err
    try:
        config = read_hf_config(path)
        check_weight_shapes(weight_files(path), config)
        tokenizer = tokenizer_for(model)
        check_tokenizer_fits(tokenizer, config, Path(path))
    except (ModelDirError, TokenizerFileError) as err:
        raise ConfigError(f"model.path: {err}") from err
    require(
        not template_kwargs or getattr(tokenizer, "chat_template", None) is not None,
        f"model.chat_template_kwargs {template_kwargs} is set, but no chat template renders the "
        "prompts (model.chat_template=false, or the model has none): nothing would read it",
    )
    return config, tokenizer


def _validate_model(model: DictConfig, tokenizer: CharTokenizer) -> LlamaConfig:
    container = OmegaConf.to_container(model)
    assert isinstance(container, dict)
    # build_llama's own and the adapters, not the architecture
    runtime = ("_target_", "gradient_checkpointing", "lora")
    kwargs = {str(k): v for k, v in container.items() if k not in runtime}
    try:
        config = LlamaConfig(**kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(str(err)) from err
    require(
        config.vocab_size == tokenizer.vocab_size,
        f"model.vocab_size ({config.vocab_size}) must equal the tokenizer's vocabulary size "
        f"({tokenizer.vocab_size})",
    )
    return config


def _check_model_size(model: LlamaConfig, max_new_tokens: int, allow_large: bool) -> None:
    """A model the machine can build (its parameters, RoPE table) and a response that fits."""
    h, v, layers = model.hidden_size, model.vocab_size, model.num_hidden_layers
    q, kv = (
        heads * model.dim_per_head
        for heads in (model.num_attention_heads, model.num_key_value_heads)
    )
    per_layer = 2 * h * q + 2 * h * kv + 3 * h * model.intermediate_size + 2 * h
    embeddings = v * h * (1 if model.tie_word_embeddings else 2)
    rope_table = model.max_position_embeddings * model.dim_per_head
    parameters = layers * per_layer + embeddings + rope_table
    check_large(parameters, MAX_PARAMETERS, "model parameters (and RoPE table)", allow_large)
    require(
        max_new_tokens < model.max_position_embeddings,
        f"train_type.sampling.max_new_tokens ({max_new_tokens}) must be below "
        f"model.max_position_embeddings ({model.max_position_embeddings})",
    )


def _validate_task(cfg: DictConfig, tokenizer: Tokenizer, model: LlamaConfig) -> ProblemSource:
    """The task, built; a dataset's rows are checked against a character tokenizer."""
    from astrai.tasks.dataset import DatasetError, DatasetTask

    # a prompt or answer holds at least this many characters: longer never fits the model
    for key in ("num_digits", "num_digits_b", "min_len", "max_len"):
        if key in cfg.task:
            bound = model.max_position_embeddings
            check_number(cfg.task[key], f"task.{key}", 0, bound, integer=True, optional=True)
    try:
        task = instantiate(cfg.task)
    except Exception as err:  # Hydra wraps the constructor's ValueError
        cause = err.__cause__ or err
        if isinstance(cause, DatasetError):  # names its key, file and row already
            raise ConfigError(str(cause)) from err
        text = str(cause).strip()
        raise ConfigError(f"task: {text.splitlines()[0] if text else cause!r}") from err
    try:  # a split that leaves one side empty (a tiny or huge eval_fraction) fails here
        task.eval_problems(1)
        task.train_problems(0, 0, 1)
    except (ValueError, RuntimeError) as err:
        raise ConfigError(f"task: {err} (task.eval_fraction)") from err
    max_new_tokens = cfg.train_type.sampling.max_new_tokens
    if not isinstance(tokenizer, CharTokenizer):
        # subword tokenizers: the checks below count characters. Prompts are encoded as the
        # run will (chat template and all): a user's every row, an embedded task's first ones
        max_prompt_tokens = model.max_position_embeddings - max_new_tokens
        if isinstance(task, DatasetTask):
            try:
                task.check_tokens(tokenizer.encode_prompt, max_prompt_tokens)
            except DatasetError as err:
                raise ConfigError(_naming_template(str(err), tokenizer)) from err
        else:
            _check_embedded_prompts(cfg, task, tokenizer, max_prompt_tokens)
        return task
    if isinstance(task, DatasetTask):
        filtering = task.filter_overlong_prompts  # a row too long is dropped, not refused
        try:
            task.check_characters(
                tokenizer.alphabet,
                None if filtering else model.max_position_embeddings - 1 - max_new_tokens,
            )
            if filtering:  # <bos> + characters, the limit the subword path counts in tokens
                task.drop_overlong(
                    tokenizer.encode_prompt, model.max_position_embeddings - max_new_tokens
                )
        except DatasetError as err:
            raise ConfigError(str(err)) from err
        return task
    missing = sorted(set(task.alphabet()) - set(tokenizer.alphabet))
    require(not missing, f"task uses characters the tokenizer lacks: {missing}")
    require(
        max_new_tokens >= task.max_answer_len(),
        f"train_type.sampling.max_new_tokens ({max_new_tokens}) cannot hold the task's longest "
        f"answer ({task.max_answer_len()} characters; one more for EOS)",
    )
    longest = 1 + task.max_prompt_len() + max_new_tokens
    require(
        longest <= model.max_position_embeddings,
        f"model.max_position_embeddings ({model.max_position_embeddings}) is shorter than "
        f"<bos> + longest prompt + train_type.sampling.max_new_tokens ({longest})",
    )
    return task


def _naming_template(message: str, tokenizer: Tokenizer) -> str:
    """A dataset row's error, with the chat template's file where the template rendered the
    row empty or without its text (``HFTokenizer.encode_prompt``)."""
    source = getattr(tokenizer, "template_file", None)
    if source is None or "the chat template renders the prompt" not in message:
        return message
    return f"{message} (model.path: {source}; model.chat_template=false feeds the rows as text)"


def _check_embedded_prompts(
    cfg: DictConfig, task: ProblemSource, tokenizer: Tokenizer, max_prompt_tokens: int
) -> None:
    """An embedded task's first prompts (``first_prompts``) through the model's tokenizer and
    chat template: a template that raises on them is one line naming its file."""
    from astrai.tasks.prompt_fit import (
        PromptLengthError,
        PromptRenderError,
        check_prompt_tokens,
        first_prompts,
    )

    prompts = first_prompts(
        task, cfg.seed, cfg.trainer.eval_prompts, cfg.train_type.prompts_per_step
    )
    try:
        check_prompt_tokens(prompts, tokenizer.encode_prompt, max_prompt_tokens)
    except PromptRenderError as err:
        source = getattr(tokenizer, "template_file", None) or cfg.model.path
        raise ConfigError(
            f"model.path: {source}: {err} (model.chat_template=false feeds the task's prompts "
            "without the template)"
        ) from err
    except PromptLengthError as err:
        raise ConfigError(str(err)) from err


def _validate_reward(reward: DictConfig, task: ProblemSource, tokenizer: Tokenizer) -> list[str]:
    """Built as the run will build it (the import, the arguments, a reward model's files),
    then tried on the first eval problems, answered with their reference and with nothing
    (with the prompt context a term asks for, as the run passes it): a reward that raises,
    miscounts or returns a non-finite value stops here, before the run. Returns its term
    names (logged as ``reward/<name>``)."""
    from astrai.rewards.base import RewardConfigError, RewardError
    from astrai.rewards.build import build_reward
    from astrai.rewards.config import reward_node
    from astrai.rollout.collect import prompt_context

    try:
        with torch.random.fork_rng(devices=[]):  # a reward model's init draws from the RNG
            built = build_reward(reward_node(reward))
    except RewardConfigError as err:
        raise ConfigError(str(err)) from err
    except Exception as err:  # a reward's own constructor (a model directory, say)
        raise ConfigError(f"reward: {err}") from err
    probe = task.eval_problems(2)
    context = prompt_context(built, probe * 2, tokenizer)
    built.rescore_rows = False  # a reward that does not return on these stops here
    try:
        built.score(
            [p.text for p in probe] * 2,
            [p.answer or "" for p in probe] + [""] * len(probe),
            [p.answer for p in probe] * 2,
            **context,
        )
    except RewardError as err:
        raise ConfigError(f"{err} (tried before the run on the first eval problems)") from err
    finally:
        built.close()  # its reward worker (the run builds its own)
    return built.names


def _validate_overlong(cfg: DictConfig) -> None:
    """``reward.overlong_buffer`` / ``reward.overlong_penalty`` (DAPO's soft overlong penalty)."""
    from astrai.rewards.base import RewardConfigError
    from astrai.rewards.config import overlong_from_config

    if "overlong_penalty" in cfg.reward:  # checked there only with a buffer
        check_number(cfg.reward.overlong_penalty, "reward.overlong_penalty", 0)
    try:
        overlong_from_config(cfg)
    except RewardConfigError as err:
        raise ConfigError(str(err)) from err


def _validate_trainer(t: DictConfig) -> None:
    check_number(t.total_steps, "trainer.total_steps", 1, integer=True)
    check_number(t.eval_every, "trainer.eval_every", 1, integer=True)
    check_number(t.eval_prompts, "trainer.eval_prompts", 1, integer=True)
    check_large(t.eval_prompts, MAX_EVAL_PROMPTS, "trainer.eval_prompts", t.allow_large)
    check_number(t.max_grad_norm, "trainer.max_grad_norm", 0, low_open=True)
    check_number(t.max_nonfinite_updates, "trainer.max_nonfinite_updates", 1, integer=True)
    if t.max_duration is not None:
        try:
            parse_duration(t.max_duration)
        except ValueError as err:
            raise ConfigError(f"trainer.max_duration: {err}") from err


def _validate_logger(logger: DictConfig, allow_large: bool) -> None:
    check_number(logger.samples_every, "logger.samples_every", 1, integer=True)
    check_number(logger.num_samples, "logger.num_samples", 0, integer=True)
    check_large(logger.num_samples, MAX_EVAL_PROMPTS, "logger.num_samples", allow_large)
    check_number(logger.flush_secs, "logger.flush_secs", 1, integer=True)
    check_number(logger.kl_every, "logger.kl_every", 1, integer=True)


def _validate_ckpt(ckpt: DictConfig) -> None:
    check_number(ckpt.every_steps, "ckpt.every_steps", 0, integer=True)
    check_number(ckpt.keep_last, "ckpt.keep_last", 1, integer=True)
    require(
        ckpt.resume is None or (isinstance(ckpt.resume, str) and ckpt.resume.strip() != ""),
        f"ckpt.resume must be 'auto', a checkpoint path or null (got {ckpt.resume!r})",
    )
    require(
        ckpt.resume_schedule in RESUME_SCHEDULES,
        f"ckpt.resume_schedule must be one of {', '.join(RESUME_SCHEDULES)} "
        f"(got {ckpt.resume_schedule!r})",
    )


def validate_config(cfg: DictConfig, where: Where = "host") -> None:
    """Raise ``ConfigError`` for the first invalid key of a composed config (``check_config``),
    then record its lag plan in it (``lag_checks.record_lag_plan``: ``engine.old_logprobs``
    and ``engine.correction`` resolved in place of ``auto``, so the ``config.yaml`` a run saves
    says what ran). Validating a validated config again changes nothing."""
    check_config(cfg, where)
    record_lag_plan(cfg)


def check_config(cfg: DictConfig, where: Where = "host") -> None:
    """Raise ``ConfigError`` for the first invalid key of a composed config; ``cfg`` is left as
    it is (``auto`` stays ``auto``).

    Args:
        where: ``host`` for a job that runs here (its GPU indices are checked against what
            this process sees); ``container`` when the Docker launcher checks a job on the host
            before its container starts (the container's GPUs cannot be counted from here;
            its files are checked where the container will read them, ``container_view``).
    """
    check_known_keys(cfg)  # a key added with ``+`` that no schema defines
    allow_large = cfg.trainer.allow_large
    require(isinstance(allow_large, bool), f"{LARGE_KEY} must be true or false")
    check_number(cfg.seed, "seed", 0, MAX_SEED, high_open=True, integer=True)
    _validate_trainer(cfg.trainer)
    _validate_ckpt(cfg.ckpt)
    _validate_logger(cfg.logger, allow_large)
    if where != "container":  # the image's packages cannot be looked up from the host
        validate_logger_backends(cfg.logger)
    check_roles(cfg)  # the models train_type requires (critic, teacher) and no others
    validate_train_type(cfg.train_type, cfg.critic, allow_large)
    _validate_overlong(cfg)
    if where == "container":  # its files, as the container will read them
        try:
            cfg = container_view(cfg)
        except NotInContainer as err:
            raise ConfigError(str(err)) from None
    tokenizer: Tokenizer
    if "path" in cfg.model.keys():  # model=hf (``in`` alone is False while path is ???)
        model, tokenizer = _validate_pretrained(cfg.model)
    else:
        tokenizer = CharTokenizer()
        model = _validate_model(cfg.model, tokenizer)
    _check_model_size(model, cfg.train_type.sampling.max_new_tokens, allow_large)
    validate_distill(cfg, model.vocab_size)
    validate_teacher(cfg, tokenizer, model)  # a container's: the host files it will read
    task = _validate_task(cfg, tokenizer, model)
    check_routes(cfg, task)
    reward_terms = _validate_reward(cfg.reward, task, tokenizer)
    overlong = ["overlong"] if cfg.reward.get("overlong_buffer") is not None else []
    validate_stop_at(cfg, reward_terms + overlong)
    validate_infra(cfg.infra, where)
    validate_engine(cfg, model, task, plan_here(cfg.infra, where).device)
    validate_env(cfg, tokenizer, task, configured_engine(cfg.engine))
    validate_lora(cfg, model)
    validate_policy_lag(cfg)
    if isinstance(cfg.infra.nproc_per_node, int):  # auto: the trainer checks the real count
        check_world_batch(cfg.train_type, cfg.infra.nproc_per_node * cfg.infra.nnodes)
