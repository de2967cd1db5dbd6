"""The names researchers bring from TRL and verl (and, for on-policy distillation, from Tinker,
NeMo-RL and slime), and astrai's key for each.

``python train.py num_generations=8`` fails like any unknown key, and the message names astrai's
key: "num_generations is TRL's name: astrai's key is train_type.group_size"
(``astrai.config.keys.unknown_key_message``). A name is looked up as typed, then by its dotted
ends (``train_type.num_generations`` finds ``num_generations``). The names come from TRL's
``GRPOConfig``, ``PPOConfig`` and the ``TrainingArguments`` they extend, and from verl's
``ppo_trainer.yaml``; distillation's from TRL's distillation trainers, verl's ``distillation``
node, tinker-cookbook's on-policy distillation, NeMo-RL's distillation config and slime's
``--opd-*`` arguments (docs/distillation.md maps them, with what differs). A foreign knob
without an exact equivalent points at the closest key and its note says what astrai does
instead. docs/configuration.md lists this table (a test keeps the two in step, and checks that
every key exists in a composed config).
"""

from __future__ import annotations

from typing import NamedTuple

PPO = "train_type=online_ppo only"
DATASET = "with task=dataset"
TOPK = "with distill.estimator=forward_topk"
NO_PROMPT_CUT = (
    "astrai never cuts a prompt: with task=dataset, true drops the prompts longer than "
    "max_position_embeddings - max_new_tokens tokens, false refuses the run"
)


class ForeignName(NamedTuple):
    """astrai's key for a foreign name, whose name it is (``TRL``, ``verl``, ``Tinker``,
    ``NeMo-RL``, ``slime``) and what differs or is worth knowing (empty: the same knob)."""

    key: str
    source: str
    note: str = ""


FOREIGN_NAMES: dict[str, ForeignName] = {
    # --- TRL: GRPOConfig, PPOConfig and TrainingArguments ---
    "learning_rate": ForeignName("train_type.optimizer.lr", "TRL"),
    "num_generations": ForeignName("train_type.group_size", "TRL"),
    "beta": ForeignName(
        "train_type.kl_coef",
        "TRL",
        "GRPOConfig's KL coefficient; the beta of TRL's distillation trainers (the generalised "
        "JSD's mix: 0 forward KL, 1 reverse) has no key: distill.estimator chooses the divergence",
    ),
    "kl_coef": ForeignName("train_type.kl_coef", "TRL"),
    "epsilon": ForeignName("train_type.clip_eps", "TRL"),
    "epsilon_high": ForeignName("train_type.clip_eps_high", "TRL"),
    "cliprange": ForeignName("train_type.clip_eps", "TRL"),
    "delta": ForeignName(
        "train_type.clip_ratio_c",
        "TRL",
        "astrai's dual clip bounds the loss of negative advantages, as verl's clip_ratio_c",
    ),
    "num_iterations": ForeignName("train_type.ppo_epochs", "TRL"),
    "num_ppo_epochs": ForeignName("train_type.ppo_epochs", "TRL"),
    "num_mini_batches": ForeignName("train_type.minibatches", "TRL"),
    "max_completion_length": ForeignName("train_type.sampling.max_new_tokens", "TRL"),
    "response_length": ForeignName("train_type.sampling.max_new_tokens", "TRL"),
    "max_prompt_length": ForeignName("task.filter_overlong_prompts", "TRL", NO_PROMPT_CUT),
    "temperature": ForeignName("train_type.sampling.temperature", "TRL"),
    "top_p": ForeignName("train_type.sampling.top_p", "TRL"),
    "top_k": ForeignName("train_type.sampling.top_k", "TRL"),
    "per_device_train_batch_size": ForeignName(
        "train_type.micro_batch_size",
        "TRL",
        "sequences per forward/backward; a step samples train_type.prompts_per_step × "
        "train_type.group_size sequences and updates in train_type.minibatches optimizer steps",
    ),
    "gradient_accumulation_steps": ForeignName(
        "train_type.micro_batch_size",
        "TRL",
        "a minibatch is accumulated in passes of micro_batch_size sequences",
    ),
    "max_steps": ForeignName("trainer.total_steps", "TRL"),
    "num_train_epochs": ForeignName(
        "trainer.total_steps", "TRL", "astrai counts RL steps, not passes over a dataset"
    ),
    "warmup_ratio": ForeignName(
        "train_type.scheduler.warmup_steps", "TRL", "a number of optimizer steps, not a share"
    ),
    "warmup_steps": ForeignName("train_type.scheduler.warmup_steps", "TRL"),
    "lr_scheduler_type": ForeignName(
        "train_type.scheduler",
        "TRL",
        "a config group: scheduler@train_type.scheduler=warmup_cosine or warmup_constant",
    ),
    "weight_decay": ForeignName("train_type.optimizer.weight_decay", "TRL"),
    "max_grad_norm": ForeignName("trainer.max_grad_norm", "TRL"),
    "loss_type": ForeignName(
        "train_type.loss_agg",
        "TRL",
        "TRL's grpo is seq_mean_token_mean, dr_grpo is seq_mean_token_sum_norm, dapo is token_mean",
    ),
    "scale_rewards": ForeignName("train_type.scale_rewards", "TRL", "group, batch or none"),
    "mask_truncated_completions": ForeignName("train_type.mask_truncated", "TRL"),
    "importance_sampling_level": ForeignName("train_type.ratio_level", "TRL"),
    "kl_estimator": ForeignName("train_type.kl_estimator", "TRL"),
    "gamma": ForeignName("train_type.ppo_gamma", "TRL", PPO),
    "lam": ForeignName("train_type.ppo_gae_lambda", "TRL", PPO),
    "vf_coef": ForeignName("train_type.ppo_vf_coef", "TRL", PPO),
    "cliprange_value": ForeignName("train_type.value_clip", "TRL", PPO),
    "whiten_rewards": ForeignName(
        "train_type.whiten_advantages", "TRL", "astrai whitens the advantages, not the rewards"
    ),
    "bf16": ForeignName("infra.precision", "TRL", "infra.precision=bf16"),
    "gradient_checkpointing": ForeignName("model.gradient_checkpointing", "TRL"),
    "model_name_or_path": ForeignName("model.path", "TRL", "with model=hf, a local directory"),
    "eval_steps": ForeignName("trainer.eval_every", "TRL"),
    "save_steps": ForeignName("ckpt.every_steps", "TRL"),
    "save_total_limit": ForeignName("ckpt.keep_last", "TRL"),
    "resume_from_checkpoint": ForeignName("ckpt.resume", "TRL"),
    "use_vllm": ForeignName("engine", "TRL", "a config group: engine=vllm"),
    # TRL's distillation trainers (DistillationConfig, GKDConfig), multi-teacher data
    "teacher_model_name_or_path": ForeignName(
        "teacher.path",
        "TRL",
        "with distill=opd: a local Hugging Face directory or an astrai checkpoint; several "
        "teachers are teacher.paths",
    ),
    "lmbda": ForeignName(
        "distill",
        "TRL",
        "astrai's distillation is always on-policy (TRL's lmbda=1): the policy samples every "
        "sequence the teacher scores, never mixed with dataset completions",
    ),
    "loss_top_k": ForeignName(
        "distill.topk",
        "TRL",
        f"{TOPK}, the rest of the vocabulary one tail bucket (TRL's loss_add_tail); TRL's 0 "
        "(the whole vocabulary) is the vocabulary's size",
    ),
    "teacher_id": ForeignName(
        "task.teacher_key",
        "TRL",
        "with task=dataset: the column naming each row's teacher, one of teacher.paths",
    ),
    # --- verl: ppo_trainer.yaml ---
    "data.train_batch_size": ForeignName("train_type.prompts_per_step", "verl"),
    "data.max_prompt_length": ForeignName("task.filter_overlong_prompts", "verl", NO_PROMPT_CUT),
    "data.max_response_length": ForeignName("train_type.sampling.max_new_tokens", "verl"),
    "data.train_files": ForeignName("task.train_path", "verl", DATASET),
    "data.val_files": ForeignName("task.eval_path", "verl", DATASET),
    "actor_rollout_ref.rollout.n": ForeignName("train_type.group_size", "verl"),
    "actor_rollout_ref.rollout.temperature": ForeignName("train_type.sampling.temperature", "verl"),
    "actor_rollout_ref.model.path": ForeignName("model.path", "verl", "with model=hf"),
    "actor_rollout_ref.model.lora_rank": ForeignName("model.lora.rank", "verl"),
    "actor_rollout_ref.model.lora_alpha": ForeignName("model.lora.alpha", "verl"),
    "actor_rollout_ref.actor.optim.lr": ForeignName("train_type.optimizer.lr", "verl"),
    "actor_rollout_ref.actor.ppo_epochs": ForeignName("train_type.ppo_epochs", "verl"),
    "actor_rollout_ref.actor.ppo_mini_batch_size": ForeignName(
        "train_type.minibatches",
        "verl",
        "a number of optimizer steps per pass, not a number of prompts per step",
    ),
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": ForeignName(
        "train_type.micro_batch_size", "verl"
    ),
    "actor_rollout_ref.actor.clip_ratio": ForeignName("train_type.clip_eps", "verl"),
    "actor_rollout_ref.actor.clip_ratio_low": ForeignName("train_type.clip_eps_low", "verl"),
    "actor_rollout_ref.actor.clip_ratio_high": ForeignName("train_type.clip_eps_high", "verl"),
    "actor_rollout_ref.actor.clip_ratio_c": ForeignName("train_type.clip_ratio_c", "verl"),
    "actor_rollout_ref.actor.entropy_coeff": ForeignName("train_type.entropy_coef", "verl", PPO),
    "actor_rollout_ref.actor.kl_loss_coef": ForeignName("train_type.kl_coef", "verl"),
    "actor_rollout_ref.actor.kl_loss_type": ForeignName("train_type.kl_estimator", "verl"),
    "actor_rollout_ref.actor.loss_agg_mode": ForeignName("train_type.loss_agg", "verl"),
    "actor_rollout_ref.actor.grad_clip": ForeignName("trainer.max_grad_norm", "verl"),
    "algorithm.adv_estimator": ForeignName(
        "train_type.advantage",
        "verl",
        "grpo, dr_grpo, rloo or reinforce_pp; gae is train_type=online_ppo",
    ),
    "algorithm.gamma": ForeignName("train_type.ppo_gamma", "verl", PPO),
    "algorithm.lam": ForeignName("train_type.ppo_gae_lambda", "verl", PPO),
    "algorithm.kl_ctrl.kl_coef": ForeignName("train_type.kl_coef", "verl"),
    "algorithm.norm_adv_by_std_in_grpo": ForeignName(
        "train_type.scale_rewards", "verl", "false is scale_rewards=none"
    ),
    "critic.optim.lr": ForeignName("critic.optimizer.lr", "verl", PPO),
    "critic.cliprange_value": ForeignName("train_type.value_clip", "verl", PPO),
    "trainer.total_training_steps": ForeignName("trainer.total_steps", "verl"),
    "trainer.total_epochs": ForeignName(
        "trainer.total_steps", "verl", "astrai counts RL steps, not passes over a dataset"
    ),
    "trainer.test_freq": ForeignName("trainer.eval_every", "verl"),
    "trainer.save_freq": ForeignName("ckpt.every_steps", "verl"),
    "trainer.n_gpus_per_node": ForeignName("infra.nproc_per_node", "verl"),
    # verl's on-policy distillation (the distillation node)
    "distillation.enabled": ForeignName("distill", "verl", "a config group: distill=opd"),
    "distillation.distillation_loss.loss_mode": ForeignName(
        "distill.estimator",
        "verl",
        "k1 and k3 as named, forward_kl_topk is forward_topk; no other mode",
    ),
    "distillation.distillation_loss.use_policy_gradient": ForeignName(
        "distill.estimator",
        "verl",
        "no switch of its own: k1 is always a reward through the policy gradient, k3 and "
        "forward_topk always direct losses",
    ),
    "distillation.distillation_loss.topk": ForeignName("distill.topk", "verl", TOPK),
    "distillation.distillation_loss.distillation_loss_coef": ForeignName("distill.coef", "verl"),
    "distillation.distillation_loss.use_task_rewards": ForeignName(
        "distill.use_task_reward", "verl"
    ),
    "distillation.distillation_loss.loss_max_clamp": ForeignName(
        "distill.loss_max_clamp",
        "verl",
        "caps each token's k3 or forward_topk term; k1's reward is not capped",
    ),
    "distillation.distillation_loss.log_prob_min_clamp": ForeignName(
        "distill.log_prob_min_clamp",
        "verl",
        "floors both logprobs of k1 and k3; forward_topk does not read it",
    ),
    "distillation.teacher_key": ForeignName("task.teacher_key", "verl", DATASET),
    # --- Tinker (tinker-cookbook's on-policy distillation) ---
    "kl_penalty_coef": ForeignName("distill.coef", "Tinker"),
    "kl_discount_factor": ForeignName(
        "distill.discount",
        "Tinker",
        "Tinker's 0 (no future sum, its default) is null here; critic-free algorithms only "
        "(PPO discounts through GAE)",
    ),
    # --- NeMo-RL (its distillation config) ---
    "distillation.topk_logits_k": ForeignName("distill.topk", "NeMo-RL", TOPK),
    "loss_fn.kl_type": ForeignName(
        "distill.estimator",
        "NeMo-RL",
        "forward is forward_topk; reverse (a top-k loss there) is closest to k1, whose policy "
        "gradient follows the reverse KL; mixed has no equivalent",
    ),
    # --- slime (its --opd-* arguments, as Python names) ---
    "use_opd": ForeignName("distill", "slime", "a config group: distill=opd"),
    "opd_type": ForeignName(
        "distill.engine",
        "slime",
        "astrai scores the teacher with its own torch forward (torch only: no SGLang or "
        "Megatron teacher)",
    ),
    "opd_kl_coef": ForeignName("distill.coef", "slime"),
    "opd_teacher_load": ForeignName(
        "teacher.path",
        "slime",
        "a Hugging Face directory or an astrai checkpoint, not a Megatron one",
    ),
}


def foreign_name(key: str) -> tuple[str, ForeignName] | None:
    """The table's entry for ``key`` as typed, else for its longest dotted end
    (``train_type.num_generations`` -> ``num_generations``); None when it has none."""
    parts = key.split(".")
    for start in range(len(parts)):
        name = ".".join(parts[start:])
        if name in FOREIGN_NAMES:
            return name, FOREIGN_NAMES[name]
    return None


def foreign_name_hint(name: str, entry: ForeignName) -> str:
    """``num_generations is TRL's name: astrai's key is train_type.group_size``, and the note."""
    note = f" ({entry.note})" if entry.note else ""
    return f"{name} is {entry.source}'s name: astrai's key is {entry.key}{note}"
