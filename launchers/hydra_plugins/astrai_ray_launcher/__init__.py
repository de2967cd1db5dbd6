"""The astrai Ray launcher for Hydra (``hydra/launcher=ray_cluster``): hydra-ray-launcher's, which
waits for every job before it reports the ones Ray lost."""
