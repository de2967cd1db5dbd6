"""What the endpoint costs a black-box agent (issue 62), measured side by side in one run:

- one chat completion through the ``openai`` SDK against astrai's endpoint (FastAPI on uvicorn,
  127.0.0.1), answered at once by a thread standing in for the episode runner: the round trip;
- the same round trip with the listening socket made without naming its protocol (what the
  endpoint did first: asyncio then leaves Nagle's algorithm on, and each reply waits for the
  client's delayed ACK);
- the embedded calculator's episodes played by the episode runner on a scripted engine, natively
  (``Calculator``) and by ``examples/agent/calculator_agent.py`` through the endpoint: the
  runner's seconds per episode each way and their ratio (the engine costs nothing here: this is
  the agent path's own overhead, which a real engine's sampling comes on top of);
- ``--chat-model DIR``: two-turn episodes of a real chat model (SmolLM2-135M-Instruct) sampled
  by the torch engine, natively and by an agent: what the overhead is beside real sampling.

    .venv/bin/python bench/agent_overhead.py            # ~20 s
    .venv/bin/python bench/agent_overhead.py --chat-model models/smollm2   # + a real chat model
    .venv/bin/python bench/agent_overhead.py --quick    # seconds (CI)
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "examples" / "agent")]  # tests.scripted_engine, the agent

import openai  # noqa: E402
import torch  # noqa: E402
from tests.scripted_engine import GREEDY, TEXT, Scripted  # noqa: E402

from astrai.checkpoints.policy import load_policy  # noqa: E402
from astrai.endpoint import server as endpoint  # noqa: E402
from astrai.endpoint.agent import AgentEnvironment  # noqa: E402
from astrai.envs.base import Environment, StepResult  # noqa: E402
from astrai.envs.calculator import Calculator, parse_calc_line  # noqa: E402
from astrai.envs.tool_calls import ParsedTurn  # noqa: E402
from astrai.rollout.engines.engine import NoKnobs, TorchEngine  # noqa: E402
from astrai.rollout.engines.sampler import SamplingConfig  # noqa: E402
from astrai.rollout.episodes.env_spec import EnvSpec  # noqa: E402
from astrai.rollout.episodes.rollout import play_episodes  # noqa: E402
from astrai.rollout.episodes.runner import EpisodeLimits, EpisodeText, run_episodes  # noqa: E402
from astrai.tasks.base import Problem  # noqa: E402

TEXT_CALC = EpisodeText(TEXT.prompt_ids, TEXT.observation_ids, TEXT.decode, parse_calc_line)
ANSWER = {"id": "c", "object": "chat.completion", "created": 0, "model": "astrai",
          "choices": [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": "408"}}]}  # fmt: skip


def round_trip_ms(server: endpoint.EndpointServer, calls: int) -> float:
    """The mean milliseconds of one SDK chat completion, answered at once."""
    session, key = server.open_session()

    def answer() -> None:
        for _ in range(calls + 1):
            session.next_event(30).reply.set_result((200, ANSWER))  # type: ignore[union-attr]

    threading.Thread(target=answer, daemon=True).start()
    client = openai.OpenAI(base_url=server.url, api_key=key, max_retries=0)
    messages: Any = [{"role": "user", "content": "12*34="}]
    client.chat.completions.create(model="astrai", messages=messages)  # a warm connection
    start = time.perf_counter()
    for _ in range(calls):
        client.chat.completions.create(model="astrai", messages=messages)
    server.close_session(session, "done")
    return (time.perf_counter() - start) / calls * 1e3


def nagle_server() -> endpoint.EndpointServer:
    """An endpoint whose listening socket is made as the first one was (``proto`` 0)."""
    made = socket.socket

    def proto_zero(family: int = -1, kind: int = -1, proto: int = -1, *rest: Any) -> Any:
        return made(family, kind, 0, *rest)

    endpoint.socket.socket = proto_zero  # type: ignore[assignment,misc]
    try:
        return endpoint.EndpointServer()
    finally:
        endpoint.socket.socket = made  # type: ignore[misc]


def per_episode_ms(n: int, agent: bool, rounds: int) -> float:
    """The runner's milliseconds per episode of ``n`` calculator episodes (a call, its reply,
    the answer), best of ``rounds``."""
    rows = [{"text": "12*34="}] * n
    best = float("inf")
    for _ in range(rounds):
        envs = ([AgentEnvironment("calculator_agent.play") for _ in rows] if agent
                else [Calculator() for _ in rows])  # fmt: skip
        engine = Scripted([["c"] * n, ["408"] * n])
        start = time.perf_counter()
        played = run_episodes(engine, envs, rows, TEXT_CALC, GREEDY, [2], EpisodeLimits())
        best = min(best, time.perf_counter() - start)
        assert all(e.done and not e.failed for e in played), [e.error for e in played]
    return best / n * 1e3


class TwoTurns(Environment):
    """The native twin of ``two_calls``: the row's text, then "Again.", then done."""

    def reset(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        self.turns = 0
        return [{"role": "user", "content": row["text"]}]

    def step(self, turn: ParsedTurn) -> StepResult:
        self.turns += 1
        if self.turns == 2:
            return StepResult(reward=float(len(turn.content)), done=True)
        return StepResult([{"role": "user", "content": "Again."}])


def two_calls(client: openai.OpenAI, row: dict[str, Any]) -> float:
    """An agent playing ``TwoTurns``' conversation through the endpoint."""
    messages: list[Any] = [{"role": "user", "content": row["text"]}]
    for follow_up in ([{"role": "user", "content": "Again."}], []):
        message = client.chat.completions.create(model="astrai", messages=messages).choices[0]
        messages += [message.message.model_dump(exclude_none=True), *follow_up]
    return float(len(messages[-1]["content"] or ""))


def chat_model_seconds(model_dir: Path, n: int) -> tuple[float, float]:
    """``n`` two-turn episodes of a chat model (32 tokens a turn, the torch sampler, seed 0),
    natively and through the endpoint: the runner's seconds each way (best of 2)."""
    loaded = load_policy(model_dir)
    tokenizer, policy = loaded.tokenizer, loaded.policy
    engine = TorchEngine(NoKnobs(), policy, tokenizer)
    sampling = SamplingConfig(max_new_tokens=32, temperature=1.0)
    problems = [Problem(prompt=f"Say {i}.", answer="", text=f"Say {i}.") for i in range(n)]
    seconds = []
    for env in (TwoTurns, AgentEnvironment):
        kwargs = {"agent": two_calls} if env is AgentEnvironment else {}
        spec = EnvSpec(env, env.__name__, "none", EpisodeLimits(), kwargs, "thread")
        best = float("inf")
        for _ in range(2):
            generator = torch.Generator().manual_seed(0)
            start = time.perf_counter()
            played = play_episodes(engine, tokenizer, spec, problems, 1, sampling, 2048,
                                   generator, 0, torch.device("cpu"))  # fmt: skip
            best = min(best, time.perf_counter() - start)
            assert not any(e.failed for e in played), [e.error for e in played]
        seconds.append(best)
    return seconds[0], seconds[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few calls and episodes (CI)")
    parser.add_argument(
        "--chat-model", type=Path, help="also a chat model's episodes (models/smollm2)"
    )
    args = parser.parse_args()
    calls, episodes, rounds = (20, 16, 1) if args.quick else (300, 256, 3)
    fixed = round_trip_ms(endpoint.endpoint_server(), calls)
    nagle = round_trip_ms(nagle_server(), max(5, calls // 10))
    print(f"agent_overhead: SDK round trip {fixed:.2f} ms; with Nagle on {nagle:.1f} ms "
          f"({nagle / fixed:.0f}x)")  # fmt: skip
    native = per_episode_ms(episodes, False, rounds)
    agent = per_episode_ms(episodes, True, rounds)
    print(f"agent_overhead: {episodes} two-turn calculator episodes: native {native:.2f} ms an "
          f"episode, agent {agent:.2f} ms ({agent / native:.0f}x)")  # fmt: skip
    if args.chat_model is not None:
        n = 4 if args.quick else 16
        native_s, agent_s = chat_model_seconds(args.chat_model, n)
        print(f"agent_overhead: {n} two-turn episodes of {args.chat_model.name} (32 tokens a "
              f"turn): native {native_s:.2f} s, agent {agent_s:.2f} s "
              f"({agent_s / native_s:.3f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
