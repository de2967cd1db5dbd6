"""Embedded tasks with verifiable rewards (partial-credit reward, exact-match evaluation)."""

from astrai.tasks.arithmetic import AdditionTask
from astrai.tasks.base import Task
from astrai.tasks.rewards import positional_match_reward
from astrai.tasks.strings import ReverseTask, SortTask

__all__ = ["AdditionTask", "ReverseTask", "SortTask", "Task", "positional_match_reward"]
