"""Multi-turn episodes (``env=...``): the episode runner (``runner``) and its calls into user code
(``calls``), how an environment is configured (``env_spec``) and its messages become tokens
(``text``, ``tool_prompt``, ``observation_limit``), the episodes laid out as a ``Rollout``
(``rollout``, ``turn_rewards``) and shown as the model saw them (``view``)."""
