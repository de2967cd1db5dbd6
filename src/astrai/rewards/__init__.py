"""Reward functions: built-ins, a reward model, and how a config becomes one."""
