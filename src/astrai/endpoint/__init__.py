"""A token-faithful OpenAI-compatible endpoint on 127.0.0.1 (issue 62): third-party code (a
black-box agent, an environment framework's own loop) talks to the run's policy through it, and
every call is answered with the ids the engine saw and sampled. The endpoint samples nothing
itself: each request is a turn of an episode the episode runner plays (``envs.agent``), so the
tokens, masks and limits are the native runner's, call for call.

- ``session``: one episode's calls, in order, handed from the HTTP server to the environment.
- ``server``: the FastAPI app served by uvicorn in a thread of this process, on loopback, behind
  a per-process token (``endpoint_server``).
- ``openai_format``: a sampled turn as a chat completion (vLLM's ``logprobs`` and
  ``return_token_ids`` conventions), and messages compared the way a trace needs.
- ``trace``: a client's record of its calls assembled into one episode's tokens, or the call
  where its history stopped extending the previous one.
"""
