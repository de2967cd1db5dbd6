"""Reward functions shared by the embedded tasks.

Rewards map a response string (EOS already stripped) and its reference answer to a float in [0, 1].
"""


def positional_match_reward(response: str, target: str) -> float:
    """Fraction of character positions where ``response`` agrees with ``target``.

    The policy is a character-level LM trained from scratch, so an exact-match reward would be 0 on
    almost every early sample and give no gradient signal at all; per-position credit lets it learn
    the answer one character at a time. Dividing by the longer of the two lengths (not the target
    length) penalises responses that run on instead of stopping, so the only way to score 1.0 is to
    emit the answer and then EOS.

    Example: response "190", target "19" -> 2 matching positions / max(3, 2) = 2/3.

    Args:
        response: decoded policy output, EOS removed.
        target: reference answer.

    Returns:
        A float in [0, 1]; 1.0 iff ``response == target``, 0.0 for an empty response.
    """
    denominator = max(len(response), len(target))
    if denominator == 0:
        # Both empty: the response is an exact match.
        return 1.0
    matches = sum(r == t for r, t in zip(response, target, strict=False))
    return matches / denominator
