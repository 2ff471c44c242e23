"""gems backend for Kunlunxin XPUs: detection, limits, tuned configs, the XPU Triton fork's
compiler options, the ops left to ATen and known deviations, as data."""
