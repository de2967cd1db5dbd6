"""The trainer's sampling pipeline: each step's rollout (``rollout_source``), sampled now or ahead
on a thread (``overlap``, ``sampling_thread``, its own CUDA stream: ``cuda_streams``), resampled
under dynamic sampling (``dynamic_sampling``), and the rollouts in flight a checkpoint keeps
(``in_flight``). It reads the trainer's build, state, stopping and setup, so it sits in
``training`` rather than under ``rollout``, which may not import the layers above it."""
