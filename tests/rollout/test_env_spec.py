"""``rollout.episodes.env_spec``: ``env.workers`` chooses where the environment's code runs
(``envs.hosts``), ``process`` unless the node says ``thread``; anything else names the key."""

from __future__ import annotations

import pytest

from astrai.rollout.episodes.env_spec import env_spec

NODE = {"_target_": "astrai.envs.guess.Guess", "parser": "none", "max_number": 15}


def test_env_workers_defaults_to_process_and_takes_thread() -> None:
    spec = env_spec(NODE)
    assert spec is not None and spec.workers == "process"
    threaded = env_spec({**NODE, "workers": "thread"})
    assert threaded is not None and threaded.workers == "thread"
    assert "workers" not in threaded.kwargs  # a run key, not the class's argument


@pytest.mark.parametrize("bad", ["fork", "", 1, None])
def test_an_unknown_env_workers_is_a_one_line_error(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^env\.workers must be one of process, thread \(got "):
        env_spec({**NODE, "workers": bad})
