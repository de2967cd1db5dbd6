"""A verifiers taskset whose task data needs a field a task row does not carry (``level``), for
``tests/endpoint/test_verifiers_episodes.py``'s refusal."""

import verifiers.v1 as vf


class NeedsData(vf.TaskData):
    level: int


class NeedsTask(vf.Task[NeedsData]):
    @vf.reward
    async def nothing(self, trace: vf.Trace) -> float:
        return 0.0


class NeedsTaskset(vf.Taskset[NeedsTask]):
    def load(self):  # type: ignore[no-untyped-def]
        return iter(())


__all__ = ["NeedsTaskset"]
