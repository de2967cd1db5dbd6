"""The embedded calculator task (``experiment=calculator``) as a verifiers 0.4.0 taskset: a
task's reward function (its rubric) and a multi-turn ``Env`` that answers each call, played
through ``env=verifiers``. It plays the task exactly as the native environment
(``astrai.envs.calculator.Calculator``) does, so the two give the same tokens, masks and rewards
(tests/endpoint/test_verifiers_conformance.py):

    PYTHONPATH=examples/verifiers python train.py experiment=calculator_verifiers

verifiers finds a taskset by its module's name (``env.taskset=calculator_taskset``) and takes
the ``Taskset`` and ``Env`` subclasses its ``__all__`` exports. A turn ``c`` (or ``c12*34``) is
a call of ``multiply``; ``CalculatorEnv.run`` answers it ``=<product>`` (``e`` for a malformed
call) as the next user message, and the first other turn is the answer. The reward (``earned``)
is the native one: up to ``call_reward`` for the first call (its characters' match with
``c``), plus the share of the answer's characters that match the product.
"""

import verifiers.v1 as vf

from astrai.envs.calculator import parse_calc_line
from astrai.tasks.rewards import positional_match_reward


class CalculatorData(vf.TaskData):
    """A ``task=products`` row: ``prompt`` is ``"12*34="``, ``answer`` the product."""

    answer: str


class CalculatorConfig(vf.TaskConfig):
    """``env.taskset_args.task.call_reward``: as ``env.call_reward`` of ``env=calculator``."""

    call_reward: float = 0.5


def _typed(text: str) -> str | None:
    """A call as the native environment reads it (``c``, ``c12*34``, or a malformed call's
    text); None for the answer."""
    turn = parse_calc_line(text)
    if turn.errors:
        return turn.errors[0].text
    if not turn.calls:
        return None
    arguments = turn.calls[0].arguments
    return f"c{arguments['a']}*{arguments['b']}" if arguments else "c"


def _factors(prompt: str) -> tuple[int, int]:
    a, b = prompt.rstrip("=?").split("*")
    return int(a), int(b)


class CalculatorTask(vf.Task[CalculatorData, vf.State, CalculatorConfig]):
    @vf.reward
    async def earned(self, trace: vf.Trace) -> float:
        """The first call's credit plus the answer's match with the product."""
        replies = [m.content or "" for m in trace.assistant_messages]
        calls = [typed for typed in map(_typed, replies) if typed is not None]
        credit = self.config.call_reward * positional_match_reward(calls[0], "c") if calls else 0.0
        last = replies[-1] if replies else ""
        if _typed(last) is not None:  # out of turns on a call: no answer
            return credit
        return credit + positional_match_reward(parse_calc_line(last).content, self.data.answer)

    @vf.metric
    async def solved(self, trace: vf.Trace) -> float:
        last = trace.last_reply or ""
        return float(_typed(last) is None and parse_calc_line(last).content == self.data.answer)


class CalculatorTasksetConfig(vf.TasksetConfig):
    task: CalculatorConfig = CalculatorConfig()


class CalculatorTaskset(vf.Taskset[CalculatorTask, CalculatorTasksetConfig]):
    """No rows of its own: astrai's task (``task=products``) gives them."""

    def load(self):  # type: ignore[no-untyped-def]
        return iter(())


class CalculatorEnv(vf.Env[vf.SingleAgentEnvConfig]):
    """Answers each call with the tool's result as the next message until the answer."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        a, b = _factors(str(task.data.prompt))
        async with agents.agent.interaction(task) as chat:
            segment = await chat.turn()
            while not segment.terminated:
                turn = parse_calc_line(segment.last_reply or "")
                if not (turn.calls or turn.errors):
                    return  # the answer
                if turn.errors:
                    reply = "e"
                else:
                    arguments = turn.calls[0].arguments
                    reply = f"={arguments.get('a', a) * arguments.get('b', b)}"
                segment = await chat.turn(reply)


__all__ = ["CalculatorEnv", "CalculatorTaskset"]
