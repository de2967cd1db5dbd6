"""``python -m astrai.export CHECKPOINT OUT``: a training checkpoint -> a Hugging Face directory.

CHECKPOINT is a ``step_<N>`` directory or a run dir (its latest checkpoint). OUT receives
``config.json``, ``generation_config.json``, ``model.safetensors`` and the tokenizer files, and
loads as-is with ``transformers.AutoModelForCausalLM`` / ``AutoTokenizer`` and vLLM. A PPO
checkpoint's critic goes to ``OUT/critic`` (``--critic-out`` to change) as a one-label
``*ForTokenClassification`` model: ``logits[..., 0]`` is V at every position.

Nothing is half-written: each directory is built in a temporary sibling and renamed into
place; an existing OUT is refused. Exit status 0, or 2 with one line on stderr.

A LoRA checkpoint (``model.lora``) exports its base with the adapters merged in, as above; with
``--adapter``, OUT is instead its PEFT adapter directory (``adapter_config.json``,
``adapter_model.safetensors``), which ``peft.PeftModel.from_pretrained`` loads onto the
transformers base. Its ``base_model_name_or_path`` is portable: ``--base-model`` as given (a Hub
id such as ``Qwen/Qwen3-0.6B``, or a path when one is wanted), else the base's own
``_name_or_path`` from its ``config.json`` when that is not a local absolute path, else the base
folder's name; never the machine's absolute path unless asked (the checkpoint keeps that one, for
resume's identity check).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path, PurePosixPath

from astrai.checkpoints import io
from astrai.checkpoints.layout import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_FILES,
    ADAPTER_MODEL_FILE,
    ADAPTERS_KEY,
    TRAINER_STATE_FILE,
    CheckpointError,
    missing_files,
)
from astrai.checkpoints.policy import (
    check_adapter_checkpoint,
    load_checkpoint_policy,
    resolve_checkpoint,
)
from astrai.cli_errors import ArgumentParser, one_line_errors, report_error
from astrai.files import write_dir_atomic
from astrai.models.precision import DTYPES
from astrai.models.pretrained import save_critic_dir, save_policy_dir

CRITIC_SUBDIR = "critic"


def export_checkpoint(
    checkpoint: str | Path,
    out: str | Path,
    dtype: str = "float32",
    critic_out: str | Path | None = None,
) -> list[Path]:
    """Export the policy (and a PPO critic) of ``checkpoint``; return the directories written."""
    out = Path(out)
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)} (got {dtype!r})")
    loaded = load_checkpoint_policy(checkpoint)
    critic_dir = Path(critic_out) if critic_out is not None else out / CRITIC_SUBDIR
    for target in (out, critic_dir) if loaded.critic is not None else (out,):
        if target.exists():  # checked before anything is written
            raise FileExistsError(f"{target} already exists; choose a new output directory")
    written = [out]
    critic = loaded.critic

    def write_all(tmp: Path) -> None:
        save_policy_dir(loaded.policy, loaded.tokenizer, tmp, dtype)
        if critic is not None and critic_out is None:  # inside OUT: part of the same rename
            (tmp / CRITIC_SUBDIR).mkdir()
            save_critic_dir(critic, loaded.tokenizer, tmp / CRITIC_SUBDIR, dtype)

    write_dir_atomic(out, write_all)
    if critic is not None:
        if critic_out is not None:
            write_dir_atomic(
                critic_dir, lambda tmp: save_critic_dir(critic, loaded.tokenizer, tmp, dtype)
            )
        written.append(critic_dir)
    return written


def portable_base_name(recorded: str, base_model: str | None = None) -> str:
    """What an exported adapter names as its base (``base_model_name_or_path``): ``base_model``
    when given; else the ``_name_or_path`` in the base's ``config.json`` (at ``recorded``, the
    path the run loaded it from) unless that is a local absolute path; else the base folder's
    name."""
    if base_model is not None:
        return base_model
    try:
        config = json.loads((Path(recorded) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    own = config.get("_name_or_path") if isinstance(config, dict) else None
    if isinstance(own, str) and own and not PurePosixPath(own).is_absolute():
        return own
    return Path(recorded).name


def export_adapter(checkpoint: str | Path, out: str | Path, base_model: str | None = None) -> Path:
    """A LoRA checkpoint's adapter as a PEFT adapter directory: ``adapter_config.json`` (its
    ``base_model_name_or_path`` from ``portable_base_name``) and ``adapter_model.safetensors``,
    what ``peft.PeftModel.from_pretrained(<the transformers base>, OUT)`` loads. Refused (one
    line) as the merged export is: an edited ``adapter_config.json``, another base at the
    recorded path."""
    out = Path(out)
    source = resolve_checkpoint(checkpoint)
    record = io.load_json(source / TRAINER_STATE_FILE)
    if not isinstance(record, dict) or record.get(ADAPTERS_KEY) is None:
        raise CheckpointError(
            f"{source}: not a LoRA checkpoint (no adapters to export); export the whole model "
            "without --adapter"
        )
    missing = missing_files(source, ADAPTER_FILES)
    if missing:
        raise CheckpointError(f"{source}: incomplete LoRA checkpoint: missing {', '.join(missing)}")
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new output directory")
    # as the merged export and resume refuse them: an adapter_config.json that disagrees with
    # the adapters' trained state, a recorded base that is not the one they were trained on
    check_adapter_checkpoint(source)

    config = json.loads((source / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = portable_base_name(
        config["base_model_name_or_path"], base_model
    )

    def write(tmp: Path) -> None:
        shutil.copyfile(source / ADAPTER_MODEL_FILE, tmp / ADAPTER_MODEL_FILE)
        text = json.dumps(config, indent=2, sort_keys=True)  # as the checkpoint writes it
        (tmp / ADAPTER_CONFIG_FILE).write_text(text, encoding="utf-8")

    write_dir_atomic(out, write)
    return out


@one_line_errors("astrai.export")
def main(argv: list[str] | None = None) -> int:
    """Exit status 0; a bad checkpoint, an existing or unwritable OUT, a full disk: one line,
    2 (``one_line_errors`` reports the OSErrors)."""
    parser = ArgumentParser(prog="python -m astrai.export", description=__doc__)
    parser.add_argument("checkpoint", type=Path, help="a step_<N> checkpoint dir or a run dir")
    parser.add_argument("out", type=Path, help="new Hugging Face model directory")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--critic-out", type=Path, default=None, help="default: OUT/critic")
    parser.add_argument(
        "--adapter",
        action="store_true",
        help="a LoRA checkpoint: write its PEFT adapter directory instead of the merged model",
    )
    parser.add_argument(
        "--base-model",
        default=None,
        help="with --adapter: the base_model_name_or_path to record (a Hub id such as "
        "Qwen/Qwen3-0.6B, or a path); default: the base's own _name_or_path, else its "
        "folder's name, never this machine's absolute path",
    )
    args = parser.parse_args(argv)
    if args.base_model is not None and not args.adapter:
        parser.error("--base-model names an adapter's base: use it with --adapter")
    try:
        if args.adapter:
            written = [export_adapter(args.checkpoint, args.out, args.base_model)]
        else:
            written = export_checkpoint(args.checkpoint, args.out, args.dtype, args.critic_out)
    except CheckpointError as err:  # a RuntimeError: not one of one_line_errors' own
        return report_error("astrai.export", err)
    for directory in written:
        print(f"wrote {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
