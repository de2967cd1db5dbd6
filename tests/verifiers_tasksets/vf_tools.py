"""A tool-using verifiers taskset (verifiers' legacy ``ToolEnv``, in its 0.4.0 shape: a task
whose ``toolsets`` are MCP tool servers verifiers starts for each episode, here a ``multiply``)
for ``tests/endpoint/test_verifiers_episodes.py``. verifiers runs a toolset as
``python -m vf_tools``: the module serves it."""

import verifiers.v1 as vf


class MultiplyConfig(vf.ToolsetConfig):
    pass


class Multiply(vf.Toolset[MultiplyConfig, vf.State]):
    TOOL_PREFIX = None  # its tool is "multiply" (not "<server>_multiply"): calc_line's call

    @vf.tool
    async def multiply(self, a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b


class ToolData(vf.TaskData):
    answer: str


class ToolTask(vf.Task[ToolData]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Multiply(MultiplyConfig())]

    @vf.reward
    async def exact(self, trace: vf.Trace) -> float:
        return float((trace.last_reply or "").strip() == self.data.answer)


class ToolTaskset(vf.Taskset[ToolTask]):
    def load(self):  # type: ignore[no-untyped-def]
        return iter(())


__all__ = ["ToolTaskset"]

if __name__ == "__main__":
    Multiply.run()
