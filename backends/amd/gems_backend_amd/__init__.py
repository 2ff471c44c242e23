"""gems backend for AMD Instinct GPUs on ROCm: detection, limits, tuned configs and the
AMD compiler options of upstream Triton, as data."""
