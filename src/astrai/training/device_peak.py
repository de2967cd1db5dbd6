"""The device's peak FLOP/s, the denominator of ``perf/mfu``.

A CUDA part's dense (no sparsity) datasheet peak in the precision the matrix multiplies run in
(``infra.precision``: bf16 on the tensor cores; fp32 without TF32, which torch leaves off for
matmuls by default). A part missing from the table, and the CPU, which has no datasheet number
that means anything for torch, get a measured one: the best rate of a square matmul in that
dtype. A measured peak is a ceiling the code can reach, so its MFU reads higher than a
datasheet's (docs/metrics.md says which a run uses).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

# NVIDIA datasheets, dense TFLOP/s: (name fragment of torch.cuda.get_device_name, bf16, fp32).
# The first fragment a name contains wins, so the longer names come first ("H100 PCIe" before
# "H100", "H200" before "H20"). fp32 None: not a number the datasheet gives; measured instead.
CUDA_PEAK_TFLOPS: tuple[tuple[str, float, float | None], ...] = (
    ("GH200", 989.4, 67.0),
    ("H200", 989.4, 67.0),
    ("H100 PCIe", 756.0, 51.0),
    ("H100 NVL", 835.5, 60.0),
    ("H100", 989.4, 67.0),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("H20", 148.0, 44.0),
    ("B200", 2250.0, None),
    ("A100", 312.0, 19.5),
    ("L40S", 362.05, 91.6),
    ("L4", 121.0, 30.3),
    ("A6000", 154.8, 38.7),  # RTX A6000 (Ampere), fp16/bf16 with fp32 accumulate
    ("RTX 4090", 165.2, 82.6),
)
# the measured matmul's side: large enough for the library's best kernel (a GPU needs far more
# work than a CPU to reach its rate), small enough to time in a fraction of a second
MEASURE_SIZE = {"cpu": 1024, "cuda": 8192}
MEASURE_SECONDS = 0.1  # per dtype: long enough for a stable best, short beside a run's start


@dataclass(frozen=True)
class DevicePeak:
    """``flops_per_s`` of one device in one dtype, and where the number comes from
    (``"datasheet: NVIDIA H100 80GB HBM3"`` or ``"measured matmul"``)."""

    flops_per_s: float
    source: str


def datasheet_peak(device_name: str, dtype: torch.dtype) -> float | None:
    """The table's dense peak (FLOP/s) for ``device_name`` in ``dtype``; None when the part,
    or its number for that dtype, is not in the table."""
    for fragment, bf16, fp32 in CUDA_PEAK_TFLOPS:
        if fragment in device_name:
            tflops = bf16 if dtype in (torch.bfloat16, torch.float16) else fp32
            return None if tflops is None else tflops * 1e12
    return None


def measured_peak(device: torch.device, dtype: torch.dtype) -> float:
    """The best FLOP/s of a ``MEASURE_SIZE`` square matmul in ``dtype`` on ``device``, over
    ``MEASURE_SECONDS`` of repeats (the first, warm-up, call not timed)."""
    size = MEASURE_SIZE.get(device.type, MEASURE_SIZE["cpu"])
    # its own stream: the run's global one (initialisation, dropout) must not move
    generator = torch.Generator(device).manual_seed(0)
    a = torch.randn(size, size, device=device, generator=generator).to(dtype)
    b = torch.randn(size, size, device=device, generator=generator).to(dtype)
    torch.matmul(a, b)  # kernels chosen and caches warm before timing
    best = float("inf")
    deadline = time.perf_counter() + MEASURE_SECONDS
    while time.perf_counter() < deadline or best == float("inf"):
        start = time.perf_counter()
        torch.matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / max(best, 1e-12)


_measured: dict[tuple[str, torch.dtype], float] = {}  # one measurement per process and dtype


def device_peak(device: torch.device, dtype: torch.dtype) -> DevicePeak:
    """``device``'s peak in ``dtype``: the datasheet's for a CUDA part in the table, else a
    measured matmul's (once per process)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = datasheet_peak(name, dtype)
        if peak is not None:
            return DevicePeak(peak, f"datasheet: {name}")
    key = (str(device), dtype)
    if key not in _measured:
        _measured[key] = measured_peak(device, dtype)
    return DevicePeak(_measured[key], "measured matmul")
