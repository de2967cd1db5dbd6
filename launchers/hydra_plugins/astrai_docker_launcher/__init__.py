"""The astrai Docker launcher for Hydra (``hydra/launcher=docker``)."""
