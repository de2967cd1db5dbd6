"""``python train.py --help``: astrai's own page, read from ``conf/`` (``--hydra-help`` is Hydra's).

Options are the YAML files under ``conf/<group>/`` (never the schemas); each key's default and
meaning come from its line and comment in the YAML, so the page cannot drift from the config.
"""

from __future__ import annotations

import re
from pathlib import Path

from astrai.paths import CONFIG_DIR

# groups chosen with ``group=option`` (tests/config/test_help.py: with the two below, every folder
# of conf/ that is a group)
GROUPS = (
    "train_type",
    "model",
    "engine",
    "task",
    "reward",
    "env",
    "collector",
    "critic",
    "distill",
    "infra",
    "logger",
)
# groups composed into train_type (and the critic's optimizer): ``group@train_type.group=option``
SHARED_BLOCKS = ("sampling", "optimizer", "scheduler")
PRESETS = ("experiment", "debug")
# (key as given on the command line, its YAML file under conf/, its dotted path in that file)
COMMON_KEYS = (
    ("trainer.total_steps", "train.yaml", "trainer.total_steps"),
    ("trainer.eval_every", "train.yaml", "trainer.eval_every"),
    ("trainer.max_duration", "train.yaml", "trainer.max_duration"),
    ("seed", "train.yaml", "seed"),
    ("train_type.prompts_per_step", "train_type/online_grpo.yaml", "prompts_per_step"),
    ("train_type.group_size", "train_type/online_grpo.yaml", "group_size"),
    ("train_type.kl_coef", "train_type/online_grpo.yaml", "kl_coef"),
    ("train_type.optimizer.lr", "optimizer/adamw.yaml", "lr"),
    ("train_type.sampling.max_new_tokens", "sampling/default.yaml", "max_new_tokens"),
    ("train_type.sampling.temperature", "sampling/default.yaml", "temperature"),
    ("ckpt.every_steps", "train.yaml", "ckpt.every_steps"),
    ("ckpt.resume", "train.yaml", "ckpt.resume"),
    ("infra.device", "infra/local.yaml", "device"),
)
# what a real-model user sets first (docs/your-own-model.md), same format
REAL_MODEL_KEYS = (
    ("model.path", "model/hf.yaml", "path"),
    ("model.lora.rank", "model/lora/default.yaml", "rank"),
    ("task.train_path", "task/dataset.yaml", "train_path"),
    ("train_type.sampling.max_new_tokens", "sampling/default.yaml", "max_new_tokens"),
    ("infra.device", "infra/local.yaml", "device"),
    ("infra.precision", "infra/local.yaml", "precision"),
)
# multi-turn episodes (docs/environments.md): env=custom's keys, each meaning from its own YAML
# comment or, where custom.yaml has none, the commented embedded environment's (calculator.yaml)
ENV_KEYS = (
    "parser",
    "max_turns",
    "max_episode_tokens",
    "max_observation_tokens",
    "step_timeout_s",
    "episode_timeout_s",
    "max_concurrency",
    "workers",
)
ENV_FILE, ENV_COMMENTS_FILE = "env/custom.yaml", "env/calculator.yaml"
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_]\w*):(?P<rest>.*)$")
DEFAULT_LINE = re.compile(r"^  - (?:override )?/?(?P<group>[\w/]+)(?:@\S+)?: (?P<option>\w+)")


def group_options(group: str, conf: Path | None = None) -> list[str]:
    """The options of ``group``: its YAML files under ``conf/<group>/``."""
    return sorted(p.stem for p in ((conf or Path(CONFIG_DIR)) / group).glob("*.yaml"))


def yaml_entry(path: Path, dotted: str) -> tuple[str, str]:
    """``(value, comment)`` of the key at ``dotted`` in the YAML file ``path``, read from its
    line (``key: value  # comment``); raises ``KeyError`` when the file has no such key."""
    stack: list[tuple[int, str]] = []
    for line in path.read_text().splitlines():
        match = KEY_LINE.match(line)
        if match is None:
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if ".".join(key for _, key in stack) == dotted:
            value, _, comment = match["rest"].partition(" #")
            return value.strip(), comment.strip()
    raise KeyError(f"{dotted} is not in {path}")


def default_options(path: Path) -> dict[str, str]:
    """``group -> option`` of a YAML file's defaults list."""
    return {
        m["group"]: m["option"]
        for line in path.read_text().splitlines()
        if (m := DEFAULT_LINE.match(line)) is not None
    }


def _key_lines(keys: tuple[tuple[str, str, str], ...], conf: Path) -> list[str]:
    """``  key=default   meaning`` for each key, read from its YAML line. A comment that goes on
    over the next lines (its first line ends in ``,``) is cut after its last complete clause."""
    lines = []
    for key, file, dotted in keys:
        value, comment = yaml_entry(conf / file, dotted)
        if comment.endswith(",") and ";" in comment:
            comment = comment.rpartition(";")[0]
        lines.append(f"  {f'{key}={value}':<40}{comment}")
    return lines


def _env_lines(conf: Path) -> list[str]:
    """``  env.<key>=default   meaning`` for ``ENV_KEYS`` (values: env=custom's), after the
    example command custom.yaml's header gives."""
    lines = [
        f"  e.g. {line.removeprefix('#').strip()}"
        for line in (conf / ENV_FILE).read_text().splitlines()
        if line.startswith("#") and "train.py env=custom" in line
    ]
    for key in ENV_KEYS:
        value, comment = yaml_entry(conf / ENV_FILE, key)
        comment = comment or yaml_entry(conf / ENV_COMMENTS_FILE, key)[1]
        lines.append(f"  {f'env.{key}={value}':<40}{comment}")
    return lines


def _option_list(group: str, default: str | None, conf: Path) -> str:
    return ", ".join(f"{o}*" if o == default else o for o in group_options(group, conf))


def help_text(conf: Path | None = None) -> str:
    """The page ``python train.py --help`` prints."""
    conf = conf or Path(CONFIG_DIR)
    chosen = default_options(conf / "train.yaml")
    blocks = default_options(conf / "train_type" / f"{chosen['train_type']}.yaml")
    lines = [
        "astrai: online RL for language models (composed with Hydra from conf/)",
        "",
        "Usage: python train.py [group=option ...] [key=value ...]",
        "       python train.py -m [overrides, with value lists a,b,c]   (a sweep)",
        "",
        "Config groups (group=option, * = default):",
        *(f"  {g:<12}{_option_list(g, chosen.get(g), conf)}" for g in GROUPS),
        "",
        "Blocks inside train_type (group@train_type.group=option):",
        *(f"  {g:<12}{_option_list(g, blocks.get(g), conf)}" for g in SHARED_BLOCKS),
        "",
        "Keys people change most (key=value; default, then meaning):",
        *_key_lines(COMMON_KEYS, conf),
        "",
        "Real model (model=hf, task=dataset; docs/your-own-model.md), the keys set first:",
        *_key_lines(REAL_MODEL_KEYS, conf),
        "  e.g. python train.py model=hf model.path=models/smollm2 model.lora.rank=16 \\",
        "           task=dataset task.train_path=data/train.jsonl reward=math",
        "",
        "Environments (multi-turn episodes; env=custom with env._target_=module.Class for your",
        "own, docs/environments.md), the keys set first (env=custom's defaults):",
        *_env_lines(conf),
        "",
        "TRL or verl names (num_generations, beta, data.train_batch_size, ...) are refused with",
        "astrai's key named: docs/configuration.md lists them.",
        "",
        "Presets (after everything else, command-line values still win):",
        f"  experiment=NAME   {', '.join(group_options('experiment', conf))}",
        f"  debug=NAME        {', '.join(group_options('debug', conf))} (a run of seconds)",
        "  e.g. python train.py debug=quick   python train.py -m experiment=ppo_sweep",
        "",
        "More: --cfg job (print the composed config), --info, --hydra-help (Hydra's help).",
        "Docs: README.md, docs/configuration.md (every key), docs/sweeps.md.",
    ]
    return "\n".join(lines)
