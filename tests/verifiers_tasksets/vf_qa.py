"""A single-turn verifiers taskset (verifiers' legacy ``SingleTurnEnv`` with a rubric, in its
0.4.0 shape: a ``Task`` whose reward compares the reply with the row's answer) for
``tests/endpoint/test_verifiers_episodes.py``. Its reward function raises on a reply ``boom``:
a rubric that fails."""

import verifiers.v1 as vf


class QAData(vf.TaskData):
    answer: str


class QATask(vf.Task[QAData]):
    @vf.reward
    async def exact(self, trace: vf.Trace) -> float:
        reply = (trace.last_reply or "").strip()
        if reply == "boom":
            raise ValueError("the rubric's own bug")
        return float(reply == self.data.answer)

    @vf.metric
    async def reply_chars(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or ""))


class QATaskset(vf.Taskset[QATask]):
    """No rows of its own: the test's task rows give them."""

    def load(self):  # type: ignore[no-untyped-def]
        return iter(())


__all__ = ["QATaskset"]
