"""gems backend for Example X-series accelerators: detection, limits, tuned configs, compiler
options, ops left to ATen and known deviations, as data (see :mod:`.plugin`)."""
