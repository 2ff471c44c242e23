"""NVIDIA's driver entry points, for gems' native dispatch layer (``gems_native_launch``).

The layer makes the launches it repeats through the driver API itself; the addresses come
from the driver library the CUDA runtime of torch loads (loading it again only finds it), so
no CUDA toolkit is needed to build the layer.
"""

from __future__ import annotations

import ctypes

from gems_core.contract import NativeLaunch

LIBRARY = "libcuda.so.1"


def native_launch() -> NativeLaunch:
    """The driver's entry points; raises (OSError, LookupError) where the driver or one of
    the functions the layer needs is missing."""
    library = ctypes.CDLL(LIBRARY)

    def address(name: str, optional: bool = False) -> int:
        try:
            function = getattr(library, name)
        except AttributeError:
            if optional:  # cuTensorMapEncodeTiled: drivers before CUDA 12 lack it
                return 0
            raise LookupError(f"{LIBRARY} lacks {name}, a driver entry point gems needs") from None
        return ctypes.cast(function, ctypes.c_void_p).value or 0

    return NativeLaunch(
        launch=address("cuLaunchKernel"),
        context_get=address("cuCtxGetCurrent"),
        context_set=address("cuCtxSetCurrent"),
        device_get=address("cuDeviceGet"),
        primary_context_retain=address("cuDevicePrimaryCtxRetain"),
        error_string=address("cuGetErrorString", optional=True),
        encode_tensor_map=address("cuTensorMapEncodeTiled", optional=True),
        torch_launcher=True,
        library=library,
    )
