"""torchmetrics stays out of start-up: ``python train.py``'s import chain, the reward modules
and a one-process evaluation never import it (its import costs 0.7–2.5 s: it imports
transformers where installed). Only a similarity reward's call or an evaluation under a process
group does (``astrai.rewards.similarity``, ``astrai.training.eval_metrics``). Nor do W&B and
MLflow (seconds of imports, threads): only a run that selects them imports them
(``astrai.metrics.loggers``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# runs in a fresh interpreter: this one may have imported torchmetrics in another test
SCRIPT = """
import sys

import astrai.rewards.builtin
import astrai.metrics.loggers
import astrai.rewards.similarity
import astrai.train
import astrai.training.launch
import astrai.training.trainer
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rewards.base import Reward, RewardTerm
from astrai.tasks.base import Problem
from astrai.training.evaluation import evaluate

imported = "torchmetrics" in sys.modules
reward = Reward([RewardTerm("exact", 1.0, astrai.rewards.builtin.exact_match)], 1.0)
problems = [Problem("1+0=", "1", "1+0="), Problem("2+0=", "2", "2+0=")]
result = evaluate(LlamaForCausalLM(LlamaConfig()), CharTokenizer(), reward, problems, 1)
print(imported, "torchmetrics" in sys.modules, result.response_len)
print(any(name in sys.modules for name in ("wandb", "mlflow")))
"""


@pytest.mark.slow  # ~4 s: a fresh interpreter importing torch and the trainer (fast-suite budget)
def test_start_up_and_a_one_process_evaluation_do_not_import_torchmetrics() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # after the imports, after the evaluation; every response is the 1 token allowed
    assert done.stdout.split() == ["False", "False", "1.0", "False"]
