"""What samples the rollouts: the ``Engine`` seam, ``TorchEngine`` and ``build_engine``
(``engine``), the torch KV-cache sampler and ``SamplingConfig`` (``sampler``), and vLLM in the
trainer's process (``seeded_vllm`` over ``in_process_vllm``, with ``vllm_settings``,
``vllm_start`` and ``vllm_requests``)."""
