"""Text-similarity rewards: a response scored against the problem's reference answer, in [0, 1],
for tasks whose answers cannot be checked exactly (summaries, translations, free-form answers).

Batched functions ``(prompts, responses, answers) -> list[float]`` like ``astrai.rewards.builtin``;
each compares a response with the whole reference (a GSM8K-shaped ``####`` reference is not cut
to its final answer here) and needs one (``task.answer_key``). torchmetrics' text metrics do the
counting; it is imported inside the calls, so a run that uses none of these rewards never
imports it (``tests/test_lazy_imports.py``).

- ``rouge_l``: ROUGE-L F1 (Lin 2004) over words.
- ``Bleu``: sentence BLEU (Papineni et al. 2002) on sacreBLEU's 13a tokens, optionally with
  Lin & Och's add-one smoothing.
- ``Chrf``: chrF / chrF++ (Popović 2015, 2017), character (and word) n-gram F-beta.
- ``edit_similarity``: 1 − Levenshtein distance / the longer length, over characters.
"""

from __future__ import annotations


def _references(name: str, answers: list[str | None]) -> list[str]:
    if any(a is None for a in answers):
        raise ValueError(f"reward {name} compares with reference answers: set task.answer_key")
    return [a for a in answers if a is not None]


def _positive_int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"reward.{key} must be an integer >= 1, got {value!r}")
    return value


def rouge_l(prompts: list[str], responses: list[str], answers: list[str | None]) -> list[float]:
    """ROUGE-L F1 of the response's words against the reference's.

    Words: lowercased, every run of characters other than a-z and 0-9 a separator (torchmetrics'
    ROUGE normalisation). With L the length of their longest common subsequence, P = L / words
    of the response, R = L / words of the reference, F = 2PR / (P + R); 0.0 when either has no
    words."""
    from torchmetrics.functional.text import rouge_score

    gold = _references("rouge_l", answers)
    return [
        float(rouge_score(r, a, rouge_keys="rougeL")["rougeL_fmeasure"])
        for r, a in zip(responses, gold, strict=True)
    ]


class Bleu:
    """Sentence BLEU of the response against the reference, on sacreBLEU's 13a tokens (words
    and punctuation apart, case kept).

    BLEU = BP · (p_1 ⋯ p_N)^(1/N): p_n = clipped matching n-grams / the response's n-grams,
    with ``smooth`` p_n = (matches + 1) / (n-grams + 1) for n ≥ 2 (Lin & Och 2004's add-one;
    p_1 stays unsmoothed); BP = 1 when the response has more tokens than the reference, else
    exp(1 − reference tokens / response tokens). 0.0 when some order has no match at all
    (torchmetrics' rule, smoothed or not): a response shorter than ``n_gram`` tokens scores 0.

    Args:
        n_gram: N, the highest n-gram order (4 is the usual BLEU).
        smooth: add-one smoothing of the orders n ≥ 2.
    """

    def __init__(self, n_gram: int, smooth: bool) -> None:
        self.n_gram = _positive_int(n_gram, "n_gram")
        if not isinstance(smooth, bool):
            raise ValueError(f"reward.smooth must be true or false, got {smooth!r}")
        self.smooth = smooth

    def __call__(
        self, prompts: list[str], responses: list[str], answers: list[str | None]
    ) -> list[float]:
        from torchmetrics.functional.text import sacre_bleu_score

        gold = _references("bleu", answers)
        return [
            float(sacre_bleu_score([r], [[a]], n_gram=self.n_gram, smooth=self.smooth))
            for r, a in zip(responses, gold, strict=True)
        ]


class Chrf:
    """chrF of the response against the reference: character n-gram F-beta, averaged over the
    orders (chrF++ with word n-grams too).

    Characters: spaces dropped, case kept. For each order n, P_n = matching n-grams / the
    response's, R_n = matching n-grams / the reference's, F_n = (1 + β²) P_n R_n / (β² P_n +
    R_n) (0 when both are 0); the score is the mean of F_n over the ``n_char_order`` character
    and ``n_word_order`` word orders (torchmetrics' sentence-level chrF). An order with no
    n-gram in the response or the reference counts 0, so a text shorter than ``n_char_order``
    characters cannot reach 1.0.

    Args:
        n_char_order: character n-gram orders 1..n (6 is chrF's).
        n_word_order: word n-gram orders 1..n; 0 = chrF, 2 = chrF++.
        beta: recall counts ``beta`` times as much as precision (2 is chrF's).
    """

    def __init__(self, n_char_order: int, n_word_order: int, beta: float) -> None:
        self.n_char_order = _positive_int(n_char_order, "n_char_order")
        if isinstance(n_word_order, bool) or not isinstance(n_word_order, int) or n_word_order < 0:
            raise ValueError(f"reward.n_word_order must be an integer >= 0, got {n_word_order!r}")
        self.n_word_order = n_word_order
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not beta > 0:
            raise ValueError(f"reward.beta must be a number > 0, got {beta!r}")
        self.beta = float(beta)

    def __call__(
        self, prompts: list[str], responses: list[str], answers: list[str | None]
    ) -> list[float]:
        from torchmetrics.functional.text import chrf_score

        gold = _references("chrf", answers)
        if not responses:
            return []
        _, per_response = chrf_score(
            responses,
            gold,
            n_char_order=self.n_char_order,
            n_word_order=self.n_word_order,
            beta=self.beta,
            return_sentence_level_score=True,
        )
        return [float(score) for score in per_response]


def edit_similarity(
    prompts: list[str], responses: list[str], answers: list[str | None]
) -> list[float]:
    """1 − d / max(|response|, |reference|), with d the Levenshtein distance between the two
    (insertions, deletions and substitutions of one character each; surrounding whitespace
    ignored, case kept); 1.0 when both are empty.

    d comes from torchmetrics' character error rate (d / |reference|), whose distance is exact:
    its ``edit_distance`` limits the search to a band around the diagonal (TER's beam of 25)
    and overestimates d between texts that align far off it."""
    from torchmetrics.functional.text import char_error_rate

    gold = _references("edit_similarity", answers)
    scores = []
    for response, reference in zip(responses, gold, strict=True):
        response, reference = response.strip(), reference.strip()
        longest = max(len(response), len(reference))
        if not reference:  # no rate to scale: every character of the response is an insertion
            distance = len(response)
        else:
            distance = round(float(char_error_rate([response], [reference])) * len(reference))
        scores.append(1.0 - distance / longest if longest else 1.0)
    return scores
