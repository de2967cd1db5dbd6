"""A stop never waits for an unfinished rollout of the sampling thread (issue 45, part 2):
``RolloutPipeline.settle`` keeps the finished ones and abandons the rest as re-issuable, with
the sampling stream rewound to before the first of them; a restored pipeline submits them
again on the weights they had."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch import nn

from astrai.training.sampling.overlap import RolloutPipeline
from astrai.training.stopping import SIGNALS


@pytest.fixture
def signals():
    SIGNALS.clear()
    yield SIGNALS
    SIGNALS.clear()


def _sampler(stream: torch.Generator, hang_at: int, release: threading.Event, seen: dict):
    """A ``SampleFn`` that draws 3 numbers per step and blocks at step ``hang_at``; it
    records each step's draw and the weight it sampled with."""

    def sample(index: int, model: nn.Module, version: int):
        step = index + 1
        draw = torch.rand(3, generator=stream)
        seen[step] = (draw, model.weight.detach().clone(), version)
        if step == hang_at:
            release.wait(30)
        return draw, {}  # the pipeline does not look inside the rollout

    return sample


def test_a_stop_abandons_the_unfinished_rollout_and_rewinds_its_stream(signals) -> None:
    torch.manual_seed(0)
    policy = nn.Linear(2, 2)
    stream = torch.Generator().manual_seed(7)
    release, seen = threading.Event(), {}
    pipeline = RolloutPipeline(
        _sampler(stream, 3, release, seen), policy, lag=2, total_steps=5, stream=stream
    )
    try:
        assert pipeline.take(1, version=0).step == 1  # submits steps 1..3; 3 hangs
        pipeline.pending[0][1].result(timeout=30)  # step 2 done
        weights_of_3 = policy.weight.detach().clone()
        with torch.no_grad():
            policy.weight.add_(1.0)  # the update after the submission: not what 3 samples
        signals.received = "SIGTERM"  # as the handler records it
        settled = pipeline.settle()
    finally:
        release.set()
        pipeline.close()
    assert [b.step for b in settled.batches] == [2]
    assert [(job.step, job.version) for job in settled.reissue] == [(3, 0)]
    assert torch.equal(settled.reissue[0].weights["weight"], weights_of_3)
    # the stream as it was once steps 1 and 2 had drawn: step 3 "not yet sampled"
    expected = torch.Generator().manual_seed(7)
    torch.rand(6, generator=expected)
    assert torch.equal(settled.stream_state, expected.get_state())
    assert pipeline.settle() is settled  # a later checkpoint saves the same


def test_settle_without_a_stop_waits_for_every_rollout(signals) -> None:
    policy = nn.Linear(2, 2)
    stream = torch.Generator().manual_seed(7)
    release, seen = threading.Event(), {}
    release.set()
    pipeline = RolloutPipeline(
        _sampler(stream, 0, release, seen), policy, lag=1, total_steps=3, stream=stream
    )
    try:
        pipeline.take(1, version=0)
        settled = pipeline.settle()
    finally:
        pipeline.close()
    assert [b.step for b in settled.batches] == [2]
    assert settled.reissue == [] and settled.stream_state is None


def test_a_restored_pipeline_samples_a_re_issued_step_as_it_would_have(signals) -> None:
    torch.manual_seed(0)
    policy = nn.Linear(2, 2)
    stream = torch.Generator().manual_seed(7)
    release, first = threading.Event(), {}
    pipeline = RolloutPipeline(
        _sampler(stream, 2, release, first), policy, lag=1, total_steps=3, stream=stream
    )
    try:
        pipeline.take(1, version=0)  # submits step 2, which hangs
        deadline = time.monotonic() + 30
        while 2 not in first and time.monotonic() < deadline:  # step 2 has drawn and hangs
            time.sleep(0.01)
        with torch.no_grad():
            policy.weight.add_(1.0)
        signals.received = "SIGTERM"
        settled = pipeline.settle()
    finally:
        release.set()
        pipeline.close()
    signals.clear()
    # the resumed run: its stream at the checkpoint's (rewound) state, the updated policy
    resumed_stream = torch.Generator()
    resumed_stream.set_state(settled.stream_state)
    again: dict = {}
    resumed = RolloutPipeline(
        _sampler(resumed_stream, 0, threading.Event(), again),
        policy,
        lag=1,
        total_steps=3,
        stream=resumed_stream,
    )
    try:
        resumed.restore([], 2, settled.reissue)
        assert resumed.take(2, version=1).step == 2
    finally:
        resumed.close()
    draw, weight, version = again[2]
    assert torch.equal(draw, first[2][0]) and torch.equal(weight, first[2][1])
    assert version == 0


@pytest.mark.parametrize(
    ("listed", "saved", "error"),
    [
        ([{"step": 3, "policy_version": 2}], [{"step": 3, "policy_version": 2}], None),
        ([{"step": 4, "policy_version": 2}], [{"step": 4, "policy_version": 2}], r"steps \[3\]"),
        ([{"step": 3, "policy_version": 2}], [{"step": 3, "policy_version": 1}], "do not match"),
        ([{"step": 3, "policy_version": 2}], [{"step": 3}], "not the re-issued"),
    ],
    ids=["ok", "wrong-step", "disagree", "no-version"],
)
def test_verify_and_resume_check_reissue_pt_alike(
    tmp_path, listed: list, saved: list, error: str | None
) -> None:
    from astrai.checkpoints.layout import EXTRA_FILES_KEY, CheckpointError
    from astrai.checkpoints.reissue import REISSUE_FILE, check_reissue_file

    weights = {"weight": torch.zeros(2, 2)}
    torch.save({"steps": [{**job, "weights": weights} for job in saved]}, tmp_path / REISSUE_FILE)
    state = {"step": 2, "reissue": listed, EXTRA_FILES_KEY: [REISSUE_FILE]}
    if error is None:
        assert [job["step"] for job in check_reissue_file(tmp_path, state)] == [3]
        return
    with pytest.raises(CheckpointError, match=error):
        check_reissue_file(tmp_path, state)
