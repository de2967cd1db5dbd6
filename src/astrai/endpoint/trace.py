"""A client's record of its calls (each chat completion's ``prompt_token_ids``,
``choices[0].token_ids``, logprobs and ``system_fingerprint``) assembled into one episode's tokens:
what a recorded agent session is trained on, built from the ids alone, never from text.

``assemble`` keeps each call's prompt as context and its sampled ids as trainable, and requires
each later call's prompt to begin with everything before it (the previous prompt and what was
sampled): the tokens it adds are context (the tool replies and user turns, the separators the
template writes). A call whose prompt does not extend the record (its history was edited or
rendered differently) is a ``TraceBreak`` naming it: the record is refused, never re-tokenised.
Through astrai's endpoint the assembled tokens are the episode runner's, token for token
(tests/endpoint/test_agent_episodes.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from astrai.envs.episode_tokens import EpisodeTokens

_FINGERPRINT = re.compile(r"^astrai-(?P<template>[^-]+)-v(?P<version>-?\d+)$")


class TraceBreak(RuntimeError):
    """A call that does not extend its episode's trace; the episode is refused
    (``env/failed_trace_break``: the host reports the cause its class declares)."""

    failure_cause = "trace_break"


@dataclass(frozen=True)
class TracedCall:
    """One call: the ids the engine saw (``prompt_ids`` [P]), sampled (``token_ids`` [T]) and
    their ``logprobs`` [T]; the policy ``version`` and the chat ``template``'s hash."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    version: int = -1
    template: str = ""


def traced_call(completion: dict[str, Any]) -> TracedCall:
    """A chat completion's JSON (astrai's endpoint, or vLLM's with ``return_token_ids`` and
    ``logprobs``) as a ``TracedCall``; ``ValueError`` for one that lacks the ids."""
    choice = completion["choices"][0]
    if "prompt_token_ids" not in completion or "token_ids" not in choice:
        raise ValueError("a traced call needs prompt_token_ids and choices[0].token_ids")
    content = (choice.get("logprobs") or {}).get("content") or []
    logprobs = [float(entry["logprob"]) for entry in content]
    if len(logprobs) != len(choice["token_ids"]):
        raise ValueError(f"{len(choice['token_ids'])} sampled ids but {len(logprobs)} logprobs")
    found = _FINGERPRINT.match(str(completion.get("system_fingerprint") or ""))
    version = int(found["version"]) if found else -1
    template = found["template"] if found else ""
    return TracedCall(list(completion["prompt_token_ids"]), list(choice["token_ids"]),
                      logprobs, version, template)  # fmt: skip


def assemble(calls: Sequence[TracedCall]) -> EpisodeTokens:
    """The episode's tokens from its calls in order (module docstring); ``TraceBreak`` at the
    first call whose prompt does not begin with the tokens before it, or whose template
    differs from the first call's."""
    tokens = EpisodeTokens()
    for k, call in enumerate(calls):
        held = tokens.ids
        if call.prompt_ids[: len(held)] != held:
            pairs = enumerate(zip(held, call.prompt_ids, strict=False))
            at = next((i for i, (a, b) in pairs if a != b), len(call.prompt_ids))
            raise TraceBreak(
                f"call {k + 1}'s prompt does not extend the trace (from token {at}): its "
                "history was edited or rendered differently"
            )
        if call.template != calls[0].template:
            raise TraceBreak(f"call {k + 1} was rendered with another chat template")
        tokens.add_context(call.prompt_ids[len(held) :], turn=k)
        tokens.add_sampled(call.token_ids, call.logprobs, call.version, turn=k + 1)
    return tokens
