"""gems backend for MetaX GPUs on MACA: detection, limits, tuned configs, the MetaX Triton
fork's compiler options and the ops left to ATen, as data."""
