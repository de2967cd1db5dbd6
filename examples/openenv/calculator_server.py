"""The embedded calculator task (``experiment=calculator``) as an OpenEnv environment, built on
``openenv-core``'s server classes and served by OpenEnv's own server: ``uvicorn
calculator_server:app``. ``env=openenv`` starts that server on 127.0.0.1 and plays it through
OpenEnv's client; its episodes are the native environment's, token for token and reward for
reward (tests/envs/test_openenv.py):

    PYTHONPATH=examples/openenv python train.py experiment=calculator_openenv

``reset(prompt=...)`` takes the task row's question (``"12*34="``); an action's ``message`` is
the turn's text: ``c`` or ``c12*34`` calls ``multiply`` (answered ``=<product>``, ``e`` for a
malformed call; the first call earns up to 0.5, ``CALCULATOR_CALL_REWARD`` in the server's
environment), any other text is the answer (the share of its characters that match the
product; the episode is done). A message ``die`` ends the server's process (the tests' dying
server).
"""

import os
from typing import Any

from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

from astrai.envs.calculator import parse_calc_line
from astrai.tasks.rewards import positional_match_reward

CALL_REWARD = float(os.environ.get("CALCULATOR_CALL_REWARD", "0.5"))


class CalculatorAction(Action):
    message: str


class CalculatorObservation(Observation):
    text: str
    solved: float | None = None  # at the answer: 1 for the product itself (env.metric_keys)


class CalculatorEnvironment(Environment[CalculatorAction, CalculatorObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True  # one instance per connection, many connections

    def __init__(self) -> None:
        super().__init__()
        self._state = State()
        self.a = self.b = self.calls = 0

    def reset(
        self, seed: Any = None, episode_id: Any = None, **kwargs: Any
    ) -> CalculatorObservation:
        prompt = str(kwargs["prompt"])
        a, b = prompt.rstrip("=?").split("*")
        self.a, self.b, self.calls = int(a), int(b), 0
        self._state = State(step_count=0)
        return CalculatorObservation(text=prompt)

    def step(
        self, action: CalculatorAction, timeout_s: Any = None, **kwargs: Any
    ) -> CalculatorObservation:
        self._state.step_count += 1
        if action.message == "die":
            os._exit(1)
        turn = parse_calc_line(action.message)
        if not (turn.calls or turn.errors):  # the answer
            score = positional_match_reward(turn.content, str(self.a * self.b))
            solved = float(score == 1.0)
            return CalculatorObservation(text="", done=True, reward=score, solved=solved)
        self.calls += 1
        reward = 0.0
        if self.calls == 1:  # the first call's credit: its text's match with "c"
            typed = turn.errors[0].text if turn.errors else _typed(turn.calls[0].arguments)
            reward = CALL_REWARD * positional_match_reward(typed, "c")
        if turn.errors:
            return CalculatorObservation(text="e", reward=reward)
        arguments = turn.calls[0].arguments
        product = arguments.get("a", self.a) * arguments.get("b", self.b)
        return CalculatorObservation(text=f"={product}", reward=reward)

    @property
    def state(self) -> State:
        return self._state


def _typed(arguments: dict[str, Any]) -> str:
    return f"c{arguments['a']}*{arguments['b']}" if arguments else "c"


app = create_fastapi_app(
    CalculatorEnvironment, CalculatorAction, CalculatorObservation, max_concurrent_envs=1024
)
