"""``python -m astrai.export CHECKPOINT OUT``: a training checkpoint -> a Hugging Face directory.

CHECKPOINT is a ``step_<N>`` directory or a run dir (its latest checkpoint). OUT receives
``config.json``, ``generation_config.json``, ``model.safetensors`` and the tokenizer files, and
loads as-is with ``transformers.AutoModelForCausalLM`` / ``AutoTokenizer`` and vLLM. A PPO
checkpoint's critic goes to ``OUT/critic`` (``--critic-out`` to change) as a one-label
``*ForTokenClassification`` model: ``logits[..., 0]`` is V at every position.

Nothing is half-written: each directory is built in a temporary sibling and renamed into
place; an existing OUT is refused. Exit status 0, or 2 with one line on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

from astrai.checkpoints.layout import CheckpointError
from astrai.checkpoints.policy import load_checkpoint_policy
from astrai.cli_errors import ArgumentParser, one_line_errors, report_error
from astrai.files import write_dir_atomic
from astrai.models.pretrained import DTYPES, save_critic_dir, save_policy_dir

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


@one_line_errors("astrai.export")
def main(argv: list[str] | None = None) -> int:
    """Exit status 0; a bad checkpoint, an existing or unwritable OUT, a full disk: one line,
    2 (``one_line_errors`` reports the OSErrors)."""
    parser = ArgumentParser(prog="python -m astrai.export", description=__doc__)
    parser.add_argument("checkpoint", type=Path, help="a step_<N> checkpoint dir or a run dir")
    parser.add_argument("out", type=Path, help="new Hugging Face model directory")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    parser.add_argument("--critic-out", type=Path, default=None, help="default: OUT/critic")
    args = parser.parse_args(argv)
    try:
        written = export_checkpoint(args.checkpoint, args.out, args.dtype, args.critic_out)
    except CheckpointError as err:  # a RuntimeError: not one of one_line_errors' own
        return report_error("astrai.export", err)
    for directory in written:
        print(f"wrote {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
