"""Every tensor astrai creates names its device, or is host-side on purpose.

The CPU test suite cannot see a CPU tensor meeting a CUDA one: on a CPU machine every tensor is
on the CPU. The first GPU run found one (``rollout_metrics`` stacked a CPU count with CUDA sums),
so this reads the source instead: a ``torch`` factory call (``torch.tensor``, ``zeros``, ...)
without ``device=`` must sit in a function listed in ``HOST_SIDE`` with the reason it is safe.
"""

from __future__ import annotations

import ast

from astrai.paths import REPO_ROOT

SOURCE = REPO_ROOT / "src" / "astrai"
FACTORIES = {
    "tensor", "as_tensor", "zeros", "ones", "full", "empty", "arange", "linspace", "eye",
    "rand", "randn", "randint", "randperm",
}  # fmt: skip
HOST_SIDE = {
    ("distributed.py", "all_reduce_max"): "a Python float, reduced on the CPU (gloo)",
    ("training/eval_metrics.py", "__init__"): "a torchmetrics state: Metric.to(device) moves it",
    ("training/evaluation.py", "weighted_totals"): "Python lists summed on the host; "
    "sum_over_ranks reduces them on the CPU (gloo)",
    ("training/schedule.py", "_lr_factor"): "a throwaway parameter a probe scheduler is built on; "
    "never meets the run's tensors",
    (
        "training/sampling/dynamic_sampling.py",
        "sample_informative",
    ): "round flags and counts, reduced on the CPU (gloo)",
    ("rollout/collect.py", "left_pad"): "built on the host, returned with .to(device)",
    ("rollout/episodes/rollout.py", "episodes_rollout"): "built on the host from the episodes' "
    "Python lists; collect_episodes moves the Rollout with .to(device)",
    ("rewards/model.py", "_left_pad"): "built on the host, returned with .to(device)",
    ("rollout/collect.py", "score_responses"): "collect_rollout moves the rewards to the device",
    ("rollout/minibatch.py", "minibatch_rows"): "a CPU shuffle (same order on any device), moved",
    ("models/llama.py", "__init__"): "module state: parameters and buffers follow .to(device)",
    ("models/rope.py", "rope_frequencies"): "RotaryEmbedding's inv_freq buffer, built at init",
    ("models/rope.py", "_yarn"): "RotaryEmbedding's inv_freq buffer, built at init",
    ("config/train_type_checks.py", "_check_optimizer"): "a dummy parameter the optimizer is "
    "built on at validation, before any device is chosen; never meets the run's tensors",
}


def deviceless_factories(source: str) -> list[tuple[str, int]]:
    """(enclosing function, line) of each ``torch.<factory>(...)`` call without ``device=``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
                continue
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and isinstance(child.func.value, ast.Name)
                and child.func.value.id == "torch"
                and child.func.attr in FACTORIES
                and not any(k.arg == "device" for k in child.keywords)
            ):
                found.append((function, child.lineno))
            visit(child, function)

    visit(ast.parse(source), "<module>")
    return found


def test_every_tensor_names_its_device_or_is_host_side_on_purpose() -> None:
    unlisted, used = [], set()
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        for function, line in deviceless_factories(path.read_text(encoding="utf-8")):
            if (relative, function) in HOST_SIDE:
                used.add((relative, function))
            else:
                unlisted.append(f"src/astrai/{relative}:{line} in {function}()")
    assert not unlisted, (
        "tensors created without device= (pass the device of the tensors they meet, or add "
        f"the function to HOST_SIDE with the reason it is safe): {unlisted}"
    )
    assert used == set(HOST_SIDE), f"stale HOST_SIDE entries: {sorted(set(HOST_SIDE) - used)}"


def test_the_check_sees_a_deviceless_tensor_and_accepts_a_placed_one() -> None:
    code = (
        "import torch\n"
        "def stats(x):\n"
        "    n = torch.tensor(float(x.numel()), dtype=torch.float64)\n"
        "    m = torch.zeros(\n        3,\n        device=x.device,\n    )\n"
        "    return torch.stack([x.sum(), n, m.sum(), torch.zeros_like(x).sum()])\n"
    )
    assert deviceless_factories(code) == [("stats", 3)]
