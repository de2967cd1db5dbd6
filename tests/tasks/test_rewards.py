"""Hand-computed values for positional_match_reward."""

import pytest

from astrai.tasks import positional_match_reward


@pytest.mark.parametrize(
    ("response", "target", "expected"),
    [
        ("19", "19", 1.0),  # exact match
        ("18", "19", 0.5),  # "1" matches, "8" != "9": 1 / max(2, 2)
        ("190", "19", 2 / 3),  # 2 matches but ran on one char: 2 / max(3, 2)
        ("1", "19", 0.5),  # stopped early: 1 / max(1, 2)
        ("", "19", 0.0),  # empty response
        ("91", "19", 0.0),  # right digits, wrong positions
        ("x", "", 0.0),  # non-empty response to an empty target: 0 / max(1, 0)
        ("", "", 1.0),  # degenerate exact match
        ("1234", "1204", 0.75),  # positions 0, 1, 3 match: 3 / 4
    ],
)
def test_positional_match_reward(response: str, target: str, expected: float) -> None:
    assert positional_match_reward(response, target) == pytest.approx(expected)


def test_only_exact_match_scores_one() -> None:
    target = "123"
    near_misses = ["12", "1234", "124", "023", "1230"]
    assert [positional_match_reward(r, target) for r in near_misses] == pytest.approx(
        [2 / 3, 3 / 4, 2 / 3, 2 / 3, 3 / 4]
    )
    assert positional_match_reward(target, target) == 1.0
