"""bench/step_overhead.py at a reduced shape: the bare loop's weights agree with the Trainer's
after one step (the math check passes) and the last line is ``ratio: <float>``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from tests.constructed_rewards import ALTERNATING

from astrai.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "step_overhead.py"
# rewards that vary within every group by construction: the step moves the weights by the
# policy gradient whatever the random model samples (all-zero rewards would leave weight decay
# and the KL term's noise, and the "weights moved" guard to chance)
REWARD = [arg for override in ALTERNATING for arg in ("--override", override)]


@pytest.mark.slow  # ~6 s each: a Trainer build and three steps of each loop
@pytest.mark.parametrize("decode", [[], ["--bare-decode", "sampler"]], ids=["forward", "sampler"])
def test_one_round_checks_the_math_and_ends_with_the_ratio(decode: list[str]) -> None:
    shape = ["--rounds", "1", "--prompts", "8", "--group", "4"]
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *shape, *decode, *REWARD],
        cwd=REPO_ROOT,
        # the reward's module (tests/) importable by the script
        env={
            **os.environ,
            "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    check = next(line for line in lines if line.startswith("math check:"))
    assert check.endswith(": ok"), check
    assert "reward mean astrai 0.500000 bare 0.500000;" in check  # the alternating reward's
    diff = float(re.search(r"max \|Δweight\| (\S+) ", check)[1])
    assert diff <= 1e-5
    assert sum(line.startswith("round ") for line in lines) == 1
    ratio = re.fullmatch(r"ratio: (\d+\.\d+)", lines[-1])
    assert ratio is not None, lines[-1]
    assert float(ratio[1]) > 0
