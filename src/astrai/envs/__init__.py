"""Multi-turn, tool-using episodes (issue 50): what an environment is, the tools it offers and
how an assistant turn's tool calls are read from its sampled text. The episode runner that
drives them through the engines, and the ``env`` config group, are not built yet
(docs/environments.md)."""
