"""``math_reward``: 1.0 when a response's final answer equals the reference answer
mathematically, by Hugging Face math-verify (``parse`` + ``verify``), else 0.0.

What counts as correct is math-verify's judgement: the response's final answer (a ``\\boxed{}``
one first, else the last LaTeX or plain-number expression) must equal the reference as a SymPy
expression, so ``\\boxed{72}``, ``72.0``, ``$72$`` all match ``72``, ``0.5`` matches
``\\frac{1}{2}`` and ``1/2``, ``1,000.`` matches ``1000``, and intervals and sets compare as such.
A response with no answer math-verify can read (empty, prose only, bare LaTeX outside ``$...$`` or
``\\boxed{}``) scores 0.0.

Reference answers: a GSM8K record's answer is a worked solution ending in ``#### <number>``; when
an answer contains ``####``, only the text after the last ``####`` is the reference. A reference
without its own delimiters (``$``, ``\\(``, ``\\[``, ``\\boxed``) is read as one LaTeX formula, so
it must be the bare answer (``\\sqrt{2}``, ``(1, 2]``, ``1,000``), not a sentence. A reference
math-verify cannot read as math is a data error and raises ``ValueError``.
"""

from __future__ import annotations

import threading
from typing import Any

from math_verify import parse, verify

from astrai.rewards.builtin import final_answer

# a reference holding any of these already marks its own math; others are wrapped in $...$
DELIMITERS = ("$", "\\(", "\\[", "\\boxed")
# math-verify's own defaults: seconds per parse, and per gold x prediction comparison
PARSE_TIMEOUT_S = 5
VERIFY_TIMEOUT_S = 5


def math_reward(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
    """One score in {0.0, 1.0} per response (parallel lists of equal length; ``prompts`` is
    unused). Raises ``ValueError`` on an answer of None or one math-verify cannot read."""
    rows = list(zip(prompts, responses, answers, strict=True))
    if any(answer is None for _, _, answer in rows):
        raise ValueError(
            "reward math compares responses with reference answers: set task.answer_key"
        )
    parse_timeout, verify_timeout = _timeouts()
    golds: dict[str, list[Any]] = {}  # G responses per prompt share one answer: parse it once
    scores = []
    for _, response, answer in rows:
        assert answer is not None  # checked above
        if answer not in golds:
            golds[answer] = _parse_gold(answer, parse_timeout)
        if not response.strip():
            scores.append(0.0)
            continue
        predicted = parse(response, parsing_timeout=parse_timeout)
        # no extraction, or a timeout, is an empty list: verify then returns False
        correct = bool(predicted) and verify(
            golds[answer], predicted, timeout_seconds=verify_timeout
        )
        scores.append(float(correct))
    return scores


def _timeouts() -> tuple[int | None, int | None]:
    """math-verify's (parse, verify) timeouts for the calling thread.

    Its timeouts are SIGALRM alarms (``signal.signal`` + ``signal.alarm``), and Python lets only
    the main thread install a signal handler: called from any other thread with a timeout set,
    ``parse`` and ``verify`` raise ``ValueError`` on every call (they do not fall back). So the
    main thread keeps the library's 5 s bounds (a response like ``$9^{9^{9^{9}}}$`` makes
    ``verify`` run for minutes; bounded it times out and scores 0.0), and other threads pass
    None, which math-verify takes as no timeout (it logs one warning per process): there such a
    response blocks the thread until SymPy finishes. A run calls this reward in a reward worker
    process (``astrai.rewards.worker``), always in that process's main thread, so a run keeps
    the 5 s bounds at every policy lag, and ``reward.timeout_s`` kills the worker when SymPy's C
    code holds out past them; only a direct call off a main thread (a test, a user's script)
    runs unbounded. The alarm replaces the worker's SIGALRM handler and clears its timer while
    it runs; the worker sets none.
    """
    if threading.current_thread() is threading.main_thread():
        return PARSE_TIMEOUT_S, VERIFY_TIMEOUT_S
    return None, None


def _parse_gold(answer: str, timeout: int | None) -> list[Any]:
    """The reference's parsed forms (SymPy expressions, then the extracted string)."""
    text = final_answer(answer).strip()
    if not any(delimiter in text for delimiter in DELIMITERS):
        # bare, math-verify reads only numbers and a/b: \sqrt{2} would be nothing, 3\sqrt{3}
        # would be 3 and (1, 2] would be 2; as $...$ all three are read whole
        text = f"${text}$"
    parsed = parse(text, parsing_timeout=timeout)
    # when SymPy cannot read the match, math-verify keeps only its string: that is no answer
    if all(isinstance(form, str) for form in parsed):
        raise ValueError(
            f"reward math cannot read the reference answer {answer!r} as math "
            f"(math-verify found no expression in {text!r})"
        )
    return parsed
