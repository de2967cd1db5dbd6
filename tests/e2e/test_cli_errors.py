"""One error path for the CLIs (issue 21, item 4): each expected failure of ``astrai.report``,
``astrai.generate`` and ``astrai.export`` is one line on stderr naming the cause, exit status 2,
never a traceback. In-process (``main(argv)`` with stderr captured): the fast suite runs no
extra interpreter; one subprocess row checks the ``python -m`` entry itself."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from astrai import export as export_cli
from astrai import generate as generate_cli
from astrai.checkpoints.policy import LoadedPolicy
from astrai.cli_errors import error_line
from astrai.models import pretrained
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import CharTokenizer
from astrai.report import table as report_table
from astrai.report.__main__ import main as report_main

MAX_POSITIONS = 64  # LlamaConfig's default max_position_embeddings


def run_main(
    main: Callable[[list[str]], int], argv: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    """``main(argv)``'s exit status (returned or raised by argparse) and its stderr."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code if isinstance(exit_.code, int) else 1
    return status, capsys.readouterr().err


def assert_one_line(status: int, err: str, prefix: str, needle: str) -> None:
    assert status == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prefix}: ") and needle in lines[0], lines[0]


def disk_full(path: object = "out") -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", str(path))


# ---------------------------------------------------------------- astrai.report


def _job(sweep: Path, name: str = "0") -> Path:
    job = sweep / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (job / ".hydra" / "config.yaml").write_text("optimized_metric: eval/accuracy\n")
    (job / "metrics.jsonl").write_text(json.dumps({"step": 1, "eval/accuracy": 0.5}) + "\n")
    (job / "summary.json").write_text(json.dumps({"step": 1, "eval/accuracy": 0.5}))
    return job


def _no_space(*args: object, **kwargs: object) -> None:
    raise disk_full("sweep/report.csv")


REPORT_CASES = {
    # name: (what to do to the sweep's job 0, extra argv, text the line must contain)
    "summary_is_a_list": (lambda j: (j / "summary.json").write_text("[]"), [], "not a JSON"),
    "non_numeric_metric": (
        lambda j: (j / "metrics.jsonl").write_text('{"step": 1, "eval/accuracy": "high"}\n'),
        [],
        "metrics.jsonl: a metric value that is not a number",
    ),
    "non_utf8_summary": (
        lambda j: (j / "summary.json").write_bytes(b'{"step": 1, "x": "\xff"}'),
        [],
        "summary.json: not UTF-8 text (byte 0xff",
    ),
    "non_utf8_overrides": (
        lambda j: (j / ".hydra" / "overrides.yaml").write_bytes(b"- seed=\xff\n"),
        [],
        "overrides.yaml: ",
    ),
    "non_utf8_metrics": (
        lambda j: (j / "metrics.jsonl").write_bytes(b'{"step": 1}\n\xff\xfe\n'),
        [],
        "metrics.jsonl: not UTF-8 text",
    ),
    "bad_yaml_config": (
        lambda j: (j / ".hydra" / "config.yaml").write_text("a: [1, 2\nb: {"),
        [],
        "config.yaml: ",
    ),
    "bad_yaml_overrides": (
        lambda j: (j / ".hydra" / "overrides.yaml").write_text("- a: b: c\n  - ]"),
        [],
        "overrides.yaml: ",
    ),
    "overrides_not_a_list": (
        lambda j: (j / ".hydra" / "overrides.yaml").write_text("seed: 0\n"),
        [],
        "overrides.yaml: not a YAML list",
    ),
    "out_is_a_file": (
        lambda j: (j.parent / "taken").write_text("x"),
        ["--out", "{sweep}/taken"],
        "not a directory",
    ),  # fmt: skip
    "unknown_option": (lambda j: None, ["--bogus"], "unrecognized arguments: --bogus"),
}


@pytest.mark.parametrize("case", list(REPORT_CASES))
def test_report_bad_input_is_one_line_and_exit_2(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    damage, extra, needle = REPORT_CASES[case]
    sweep = tmp_path / "sweep"
    damage(_job(sweep))
    argv = [str(sweep), *(a.format(sweep=sweep) for a in extra)]
    status, err = run_main(report_main, argv, capsys)
    assert_one_line(status, err, "astrai.report", needle)
    assert not (sweep / "report.csv").exists()


def test_report_on_a_full_disk_says_no_space_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = tmp_path / "sweep"
    _job(sweep)
    monkeypatch.setattr(report_table.Table, "write_csv", _no_space)
    status, err = run_main(report_main, [str(sweep)], capsys)
    assert_one_line(status, err, "astrai.report", "report.csv: No space left on device")


# ---------------------------------------------------------------- astrai.generate


def _tiny_policy() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=1)).eval()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-layer random model with the character tokenizer, as ``astrai.export`` writes it."""
    directory = tmp_path_factory.mktemp("model")
    save_policy_dir(_tiny_policy(), CharTokenizer(), directory)
    return directory


def _char_tokenizer_policy(monkeypatch: pytest.MonkeyPatch, source: Path) -> None:
    """``load_policy`` as for a training checkpoint: astrai's own character tokenizer."""
    loaded = LoadedPolicy(_tiny_policy(), CharTokenizer(), source)
    monkeypatch.setattr(generate_cli, "load_policy", lambda *a, **k: loaded)


GENERATE_CASES = {
    # name: (argv after SOURCE, text the line must contain)
    "device_banana": (["1+1=", "--device", "banana"], "--device banana: not a torch device"),
    "device_meta": (["1+1=", "--device", "meta"], "--device meta: use cpu or cuda[:N]"),
    "unknown_characters": (["1+1=é€"], "the tokenizer does not know the character(s) 'é', '€'"),
    "max_new_tokens_past_the_model": (
        ["1+1=", "--max-new-tokens", "100000"],
        f"max_position_embeddings ({MAX_POSITIONS}); use at most {MAX_POSITIONS - 5}",
    ),
    "prompt_past_the_model": (
        ["1+" * 32 + "1="],  # 67 tokens with BOS
        f"the longest prompt has 67 tokens, which leaves no position for a response within "
        f"the model's max_position_embeddings ({MAX_POSITIONS}); shorten it",
    ),
    "n_huge": (["1+1=", "--n", "1e8"], "--n must be in [1, 4096] (got 100000000)"),
    "n_not_whole": (["1+1=", "--n", "2.5"], "argument --n: not a whole number: '2.5'"),
    "n_zero": (["1+1=", "--n", "0"], "--n must be in [1, 4096] (got 0)"),
    "top_p_zero": (["1+1=", "--top-p", "0"], "--top-p must be in (0, 1]"),
    "top_p_five": (["1+1=", "--top-p", "5"], "--top-p must be in (0, 1]"),
    "top_p_nan": (["1+1=", "--top-p", "nan"], "--top-p must be in (0, 1]"),
    "top_k_negative": (["1+1=", "--top-k", "-1"], "--top-k must be >= 0"),
    "temperature_nan": (["1+1=", "--temperature", "nan"], "--temperature must be a finite"),
    "temperature_negative": (["1+1=", "--temperature", "-1"], "--temperature must be a finite"),
    "no_prompt": ([], "give either --task [NAME] or one or more prompts"),
}


@pytest.mark.parametrize("case", list(GENERATE_CASES))
def test_generate_bad_option_or_prompt_is_one_line_and_exit_2(
    case: str, model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, needle = GENERATE_CASES[case]
    status, err = run_main(generate_cli.main, [str(model_dir), *args], capsys)
    assert_one_line(status, err, "astrai.generate", needle)
    assert capsys.readouterr().out == ""  # nothing sampled


def test_generate_names_a_character_the_checkpoint_tokenizer_lacks(
    model_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _char_tokenizer_policy(monkeypatch, model_dir)
    status, err = run_main(generate_cli.main, [str(model_dir), "2+2=", "1+ñ"], capsys)
    assert_one_line(status, err, "astrai.generate", "prompt '1+ñ': the tokenizer does not know")
    assert "'ñ'" in err


def test_generate_within_bounds_still_samples(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(model_dir), "1+1=", "--max-new-tokens", str(MAX_POSITIONS - 5), "--n", "1e0"]
    status, err = run_main(generate_cli.main, argv, capsys)
    assert status == 0, err


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{% for m in messages %}{% endfor %}", "renders the prompt as empty text"),
        ("{% for m in messages %}q: {% endfor %}a:", "renders the prompt without its user text"),
    ],
    ids=["empty", "no_content"],
)
def test_generate_names_a_template_that_renders_an_empty_or_contentless_prompt(
    model_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    template: str,
    why: str,
) -> None:
    """An empty prompt used to raise IndexError in the sampler."""
    source = tmp_path / "templated"
    source.mkdir()
    for path in model_dir.iterdir():
        (source / path.name).write_bytes(path.read_bytes())
    (source / "chat_template.jinja").write_text(template)
    status, err = run_main(generate_cli.main, [str(source), "1+1="], capsys)
    assert_one_line(status, err, "astrai.generate", f"{source / 'chat_template.jinja'}: ")
    assert why in err and "--no-chat-template" in err
    assert capsys.readouterr().out == ""
    status, err = run_main(generate_cli.main, [str(source), "1+1=", "--no-chat-template"], capsys)
    assert status == 0, err


def test_generate_refuses_a_config_json_the_weights_disagree_with_before_building(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``head_dim: 1000000``: read from the safetensors header, before a model of that size."""
    source = tmp_path / "edited"
    source.mkdir()
    for path in model_dir.iterdir():
        (source / path.name).write_bytes(path.read_bytes())
    config = json.loads((source / "config.json").read_text())
    (source / "config.json").write_text(json.dumps({**config, "head_dim": 1_000_000}))
    status, err = run_main(generate_cli.main, [str(source), "1+1="], capsys)
    assert_one_line(status, err, "astrai.generate", f"{source / 'model.safetensors'}: model.")
    assert "config.json says" in err


def test_a_truncated_weights_file_is_one_line_naming_it(
    model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for path in model_dir.iterdir():
        (broken / path.name).write_bytes(path.read_bytes())
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    status, err = run_main(generate_cli.main, [str(broken), "1+1="], capsys)
    assert_one_line(status, err, "astrai.generate", f"{weights}: truncated safetensors file")


# ---------------------------------------------------------------- astrai.export


@pytest.fixture
def checkpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A stand-in ``step_1`` whose policy is loaded in-process."""
    step = tmp_path / "step_1"
    step.mkdir()
    loaded = LoadedPolicy(_tiny_policy(), CharTokenizer(), step)
    monkeypatch.setattr(export_cli, "load_checkpoint_policy", lambda _: loaded)
    return step


def test_export_to_an_unwritable_path_is_one_line(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a_file").write_text("x")
    out = tmp_path / "a_file" / "model"
    status, err = run_main(export_cli.main, [str(checkpoint), str(out)], capsys)
    assert_one_line(status, err, "astrai.export", str(tmp_path / "a_file"))


def test_export_on_a_full_disk_says_no_space_left(
    checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_space(model: object, tokenizer: object, directory: Path, dtype: str) -> None:
        raise disk_full(directory / "model.safetensors")

    monkeypatch.setattr(export_cli, "save_policy_dir", no_space)
    out = tmp_path / "model"
    status, err = run_main(export_cli.main, [str(checkpoint), str(out)], capsys)
    assert_one_line(status, err, "astrai.export", "model.safetensors: No space left on device")
    assert list(tmp_path.iterdir()) == [checkpoint]  # the temporary dir is gone


def test_export_on_a_full_disk_in_safetensors_names_the_file(
    checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """safetensors reports a full disk as its own ``SafetensorError``, not an ``OSError``: the
    export still says which file and why, in one line, and leaves nothing behind."""
    from safetensors import SafetensorError

    def no_space(*args: object, **kwargs: object) -> None:
        raise SafetensorError(
            'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
            'space left on device" })'
        )

    monkeypatch.setattr(pretrained, "save_file", no_space)
    out = tmp_path / "model"
    status, err = run_main(export_cli.main, [str(checkpoint), str(out)], capsys)
    assert_one_line(status, err, "astrai.export", "model.safetensors: No space left on device")
    assert list(tmp_path.iterdir()) == [checkpoint]  # the temporary dir is gone


def test_export_into_an_existing_dir_is_one_line(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, err = run_main(export_cli.main, [str(checkpoint), str(tmp_path)], capsys)
    assert_one_line(status, err, "astrai.export", "already exists; choose a new output directory")


# ---------------------------------------------------------------- the helper and python -m


@pytest.mark.parametrize(
    ("err", "line"),
    [
        (disk_full("/x/y"), "/x/y: No space left on device"),
        (
            PermissionError(errno.EACCES, "Permission denied", "/root/x"),
            "/root/x: Permission denied",
        ),  # fmt: skip
        (
            UnicodeDecodeError("utf-8", b"ab\xff", 2, 3, "invalid"),
            "not UTF-8 text (byte 0xff at offset 2)",
        ),  # fmt: skip
        (ValueError("two\n  lines"), "two lines"),
    ],
)
def test_error_line_is_one_line(err: BaseException, line: str) -> None:
    assert error_line(err) == line


def test_python_m_report_exits_2_with_one_line(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    (_job(sweep) / "summary.json").write_text("[]")
    result = subprocess.run(
        [sys.executable, "-m", "astrai.report", str(sweep)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_one_line(result.returncode, result.stderr, "astrai.report", "not a JSON object")
