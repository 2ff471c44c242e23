"""gems backend for NVIDIA GPUs: detection, limits and tuned configs, as data.

Installed, it registers ``gems_backend_nvidia.plugin`` in the entry-point group
``gems_core.backends``; gems selects it where an NVIDIA GPU is present (or with
``GEMS_DEVICE=nvidia``).
"""
