"""``task=dataset``: prompts and reference answers from local files, read with HF ``datasets``.

Files: ``.jsonl``, ``.json``, ``.parquet``, ``.csv``, or a ``save_to_disk`` directory (one
split). Local only: ``datasets`` runs offline and its cache goes to a temporary folder that is
removed after reading, so nothing is downloaded or left behind.

A row's prompt (``prompt_key``) is a string (one user turn) or a list of ``{role, content}``
turns; records in the instruction shape (``instruction``, ``input``, ``output``: no
``prompt_key`` column) become a system turn (the instruction) and a user turn (the input; the
instruction alone when the input is empty), with ``output`` as the reference answer.
``system_prompt`` puts a system turn first in every row that has none of its own: a row's own
system turn (an instruction row's instruction, a system turn of its ``messages``) wins, as a
chat template's default system message gives way to the conversation's, so no prompt ever
holds two system turns. The answer (``answer_key``) is text, or a number written as text;
``answer_key=null`` gives no answers (for rewards that need none).

``filter_overlong_prompts`` drops the rows whose rendered prompt is longer than the run allows
(``fit_lengths``) instead of refusing the run (verl's ``filter_overlong_prompts``).

The eval split is ``eval_path``'s rows, or the rows of the train file whose prompt hashes into
``eval_fraction`` (a salted SHA-256 of the prompt, as the embedded tasks: the same split in every
process and for every seed). Training rows never include an eval prompt. The training stream is
epochs of the training rows, each shuffled by (seed, epoch): batch ``index`` is a pure function
of (seed, index, n), so a resumed run continues exactly.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from astrai.chat import Prompt
from astrai.tasks.base import _EVAL_SALT, _HASH_BUCKETS, Problem, _stable_int
from astrai.tasks.dataset_rows import (
    DatasetError,
    parse_answer,
    parse_turns,
    prompt_split_key,
    prompt_text,
    read_rows,
)
from astrai.tasks.prompt_fit import (
    OverlongReport,
    PromptError,
    PromptLengthError,
    check_prompt_tokens,
    count_prompt_tokens,
)

# what a "prompt too long" message adds: the way to drop such rows instead
FILTER_HINT = " (task.filter_overlong_prompts=true drops such rows instead)"
INSTRUCTION_KEYS = ("instruction", "input", "output")


class DatasetTask:
    """Problems from local prompt files (see the module docstring).

    Args:
        train_path: the training file or ``save_to_disk`` folder.
        eval_path: the eval file; None holds out ``eval_fraction`` of ``train_path``.
        eval_fraction: share of the train file's prompts held out when ``eval_path`` is None.
        prompt_key: the prompt column.
        answer_key: the reference-answer column; None for rewards that need no answer.
        system_prompt: a system turn put before every prompt that has no system turn of its
            own; None for none.
        filter_overlong_prompts: drop the rows whose prompt is too long for the run
            (``fit_lengths``) instead of refusing it.
        teacher_key: the column naming each row's teacher (several teachers,
            ``teacher.paths``: ``training.distillation``); None for none.
    """

    name = "dataset"

    def __init__(
        self,
        train_path: str,
        eval_path: str | None,
        eval_fraction: float,
        prompt_key: str,
        answer_key: str | None,
        system_prompt: str | None,
        filter_overlong_prompts: bool = False,
        teacher_key: str | None = None,
    ) -> None:
        if eval_path is None and not 0.0 < eval_fraction < 1.0:
            raise DatasetError(f"task.eval_fraction must be in (0, 1), got {eval_fraction}")
        if not isinstance(filter_overlong_prompts, bool):
            raise DatasetError(
                f"task.filter_overlong_prompts must be true or false, got "
                f"{filter_overlong_prompts!r}"
            )
        self.eval_fraction = eval_fraction
        self.prompt_key, self.answer_key, self.system_prompt = prompt_key, answer_key, system_prompt
        self.filter_overlong_prompts = filter_overlong_prompts
        self.train_path, self.eval_path = train_path, eval_path
        self.teacher_key = teacher_key
        # each prompt's teacher (``teacher_key``'s column), by the prompt's text
        self.row_teachers: dict[str, str] = {}
        # rows whose own system turn kept task.system_prompt out (reported at start)
        self.own_system_rows = 0
        train = self._read(Path(train_path), "task.train_path")
        if eval_path is None:
            held_out = [self._held_out(split_key) for _, _, split_key in train]
            evals = [row for row, out in zip(train, held_out, strict=True) if out]
            train = [row for row, out in zip(train, held_out, strict=True) if not out]
            source = f"task.train_path {train_path} (task.eval_fraction={eval_fraction})"
            eval_source = source
        else:
            evals = self._read(Path(eval_path), "task.eval_path")
            eval_keys = {split_key for _, _, split_key in evals}
            train = [row for row in train if row[2] not in eval_keys]
            source = f"task.train_path {train_path} (less the prompts of task.eval_path)"
            eval_source = f"task.eval_path {eval_path}"
        if not train:
            raise DatasetError(f"{source}: no training rows")
        if not evals:
            raise DatasetError(f"{eval_source}: no eval rows")
        self.train = [p for p, _, _ in train]
        self.evals = [p for p, _, _ in evals]
        # (file, row) of each problem, for messages about a row's content
        self.train_rows = [where for _, where, _ in train]
        self.eval_rows = [where for _, where, _ in evals]

    def _held_out(self, split_key: str) -> bool:
        bucket = _stable_int(_EVAL_SALT + split_key) % _HASH_BUCKETS
        return bucket < self.eval_fraction * _HASH_BUCKETS

    def _with_system_prompt(self, prompt: Prompt) -> Prompt:
        """``prompt`` with ``system_prompt`` first, unless it has a system turn of its own
        (which wins: one system turn, the row's)."""
        if self.system_prompt is None:
            return prompt
        if isinstance(prompt, str):
            prompt = ({"role": "user", "content": prompt},)
        elif any(turn["role"] == "system" for turn in prompt):
            self.own_system_rows += 1
            return prompt
        return ({"role": "system", "content": self.system_prompt}, *prompt)

    def _read(self, path: Path, key: str) -> list[tuple[Problem, str, str]]:
        """Every row of ``path`` as a problem with its ``"<file> row <n>"`` and the identity
        the eval split hashes (``prompt_split_key`` of the row's own prompt: taken before
        ``system_prompt`` is added, so changing the system prompt keeps the split)."""
        rows = read_rows(path, key)
        if not rows:
            raise DatasetError(f"{key}: {path} has no rows")
        columns = set(rows[0])
        instruction_shape = self.prompt_key not in columns and "instruction" in columns
        if self.prompt_key not in columns and not instruction_shape:
            raise DatasetError(
                f"{key}: {path} has no column {self.prompt_key!r} (task.prompt_key); its "
                f"columns: {sorted(columns)}"
            )
        answer_key = self.answer_key
        if instruction_shape and answer_key is not None and answer_key not in columns:
            answer_key = "output"
        if answer_key is not None and answer_key not in columns:
            raise DatasetError(
                f"{key}: {path} has no column {answer_key!r} (task.answer_key; null for a "
                f"reward that needs no answer); its columns: {sorted(columns)}"
            )
        problems = []
        for number, row in enumerate(rows, 1):
            where = f"{path} row {number}"
            if instruction_shape:
                prompt = self._instruction_turns(row, where)
            else:
                prompt = parse_turns(row.get(self.prompt_key), f"{where}: {self.prompt_key!r}")
            split_key = prompt_split_key(prompt)
            prompt = self._with_system_prompt(prompt)
            answer = None
            if answer_key is not None:
                answer = parse_answer(row.get(answer_key), f"{where}: {answer_key!r}")
            problem = Problem(prompt, answer, prompt_text(prompt))
            if self.teacher_key is not None:
                self._note_teacher(problem.text, row, where)
            problems.append((problem, where, split_key))
        return problems

    def _note_teacher(self, text: str, row: Mapping[str, Any], where: str) -> None:
        """Record ``row``'s teacher (``teacher_key``'s column, a non-empty string) for its
        prompt; one prompt with two teachers is refused (a rollout knows its rows by text)."""
        key = self.teacher_key
        value = row.get(key) if key is not None else None
        if not isinstance(value, str) or not value:
            raise DatasetError(
                f"{where}: {key!r} (task.teacher_key) must name the row's teacher, got {value!r}"
            )
        earlier = self.row_teachers.setdefault(text, value)
        if earlier != value:
            raise DatasetError(
                f"{where}: its prompt was given teacher {earlier!r} by an earlier row and "
                f"{value!r} here (task.teacher_key: one teacher per prompt)"
            )

    def teacher_of(self, text: str) -> str:
        """The teacher a prompt's row names (``teacher_key``), by the prompt's text."""
        return self.row_teachers[text]

    @staticmethod
    def _instruction_turns(row: Mapping[str, Any], where: str) -> Prompt:
        instruction = row.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            raise DatasetError(f"{where}: 'instruction' is empty")
        user = row.get("input") or ""
        if not isinstance(user, str):
            raise DatasetError(f"{where}: 'input' must be text")
        if not user.strip():
            return instruction
        return ({"role": "system", "content": instruction}, {"role": "user", "content": user})

    # --- the problem stream ----------------------------------------------------------------

    def train_problems(self, seed: int, index: int, n: int) -> list[Problem]:
        """Batch ``index`` of the training stream for ``seed``: positions ``index·n`` to
        ``(index+1)·n`` of the epochs, each a shuffle of every training row."""
        size = len(self.train)
        out = []
        for position in range(index * n, (index + 1) * n):
            epoch, offset = divmod(position, size)
            out.append(self.train[_epoch_order(seed, epoch, size)[offset]])
        return out

    def eval_problems(self, n: int) -> list[Problem]:
        """The first ``n`` eval rows, in file order."""
        return self.evals[:n]

    def split_sizes(self) -> tuple[int, int, bool]:
        """``(train rows, eval rows, True)``, after any filtering: what the start banner says."""
        return len(self.train), len(self.evals), True

    def check_characters(self, alphabet: str, max_prompt_chars: int | None) -> None:
        """For a character tokenizer: every prompt is one user turn whose characters are in
        ``alphabet`` and that fits ``max_prompt_chars``; names the row."""
        allowed = set(alphabet)
        rows = zip(self.train + self.evals, self.train_rows + self.eval_rows, strict=True)
        for problem, where in rows:
            if not isinstance(problem.prompt, str):
                raise DatasetError(
                    f"{where}: chat turns (or task.system_prompt) need a model with a chat "
                    "template (model=hf, smollm2); this model's character tokenizer reads one "
                    "string"
                )
            # the prompt only: answers are read by rewards, never tokenized
            bad = next((c for c in problem.prompt if c not in allowed), None)
            if bad is not None:
                raise DatasetError(
                    f"{where}: the prompt has the character {bad!r}, which the model's "
                    f"character tokenizer lacks (it has {alphabet!r})"
                )
            if max_prompt_chars is not None and len(problem.prompt) > max_prompt_chars:
                raise DatasetError(
                    f"{where}: the prompt has {len(problem.prompt)} characters; with "
                    f"train_type.sampling.max_new_tokens the model's positions allow "
                    f"{max_prompt_chars}{FILTER_HINT}"
                )

    def check_tokens(
        self, encode_prompt: Callable[[Prompt], list[int]], max_prompt_tokens: int
    ) -> OverlongReport | None:
        """For a subword tokenizer (``encode_prompt``, chat template included): every prompt
        renders (chat turns need a chat template, which may refuse them) and has at most
        ``max_prompt_tokens`` tokens; names the row. Tokenizes every row once, before the run,
        so a bad row never stops a run at the step that draws it. With
        ``filter_overlong_prompts`` a longer row is dropped instead (``drop_overlong``)."""
        if self.filter_overlong_prompts:
            return self.drop_overlong(encode_prompt, max_prompt_tokens)
        rows = zip(self.train + self.evals, self.train_rows + self.eval_rows, strict=True)
        try:
            check_prompt_tokens(
                ((problem.prompt, where) for problem, where in rows),
                encode_prompt,
                max_prompt_tokens,
            )
        except PromptLengthError as err:
            raise DatasetError(f"{err}{FILTER_HINT}") from err
        except PromptError as err:
            raise DatasetError(str(err)) from err
        return None

    def drop_overlong(
        self, encode_prompt: Callable[[Prompt], list[int]], max_prompt_tokens: int
    ) -> OverlongReport:
        """Drop the training and eval rows whose prompt (as ``encode_prompt`` encodes it, chat
        template included) has more than ``max_prompt_tokens`` tokens; the rest keep their
        order. Every row is rendered once: one that does not render is still a DatasetError
        naming it, and so is a split left with no row at all."""
        try:
            train = [
                count_prompt_tokens(p.prompt, where, encode_prompt) <= max_prompt_tokens
                for p, where in zip(self.train, self.train_rows, strict=True)
            ]
            evals = [
                count_prompt_tokens(p.prompt, where, encode_prompt) <= max_prompt_tokens
                for p, where in zip(self.evals, self.eval_rows, strict=True)
            ]
        except PromptError as err:
            raise DatasetError(str(err)) from err
        eval_source = self.eval_path or self.train_path
        for kind, kept, source in (
            ("training", train, self.train_path),
            ("eval", evals, eval_source),
        ):
            if not any(kept):
                raise DatasetError(
                    f"task.filter_overlong_prompts: all {len(kept)} {kind} prompts of {source} "
                    f"are longer than {max_prompt_tokens} tokens (the model's "
                    "max_position_embeddings less train_type.sampling.max_new_tokens): none is "
                    "left"
                )
        report = OverlongReport(
            dropped_train=train.count(False),
            total_train=len(train),
            dropped_eval=evals.count(False),
            total_eval=len(evals),
            max_prompt_tokens=max_prompt_tokens,
        )
        self.train = [p for p, keep in zip(self.train, train, strict=True) if keep]
        self.train_rows = [w for w, keep in zip(self.train_rows, train, strict=True) if keep]
        self.evals = [p for p, keep in zip(self.evals, evals, strict=True) if keep]
        self.eval_rows = [w for w, keep in zip(self.eval_rows, evals, strict=True) if keep]
        return report

    def system_prompt_line(self) -> str | None:
        """The start-up line about rows whose own system turn kept ``system_prompt`` out;
        None when there are none."""
        if self.system_prompt is None or not self.own_system_rows:
            return None
        return (
            f"task: {self.own_system_rows} rows have a system turn of their own, which wins "
            "over task.system_prompt (one system turn per prompt)"
        )


@lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, size: int) -> tuple[int, ...]:
    order = list(range(size))
    random.Random(_stable_int(f"dataset:{seed}:{epoch}")).shuffle(order)
    return tuple(order)
