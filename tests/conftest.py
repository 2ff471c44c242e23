import atexit
import os
import shutil
import tempfile
from pathlib import Path

# Tests run on the built-in cpu backend unless GEMS_DEVICE says otherwise, with a cache of
# their own so generated kernels and tuning choices do not leak between runs; it is removed
# when the run ends. The native dispatch layer's build (a minute of compiling, keyed by the
# torch version and its source) is the exception: it is kept in the user's cache and reused.
# Tests compare gems' kernels with ATen from the first call: kernels compile before it returns
# (tests/test_background_compile.py turns background compiles on where it tests them).
os.environ["GEMS_COMPILE"] = "sync"

if "GEMS_CACHE_DIR" not in os.environ:
    from gems_core.disk_cache import configured_cache_dir

    _native = configured_cache_dir() / "native"
    _cache = tempfile.mkdtemp(prefix="gems-test-cache-")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
    os.environ["GEMS_CACHE_DIR"] = _cache
    try:
        _native.mkdir(parents=True, exist_ok=True)
        (Path(_cache) / "native").symlink_to(_native, target_is_directory=True)
    except OSError:  # an unwritable home: the layer is built in the run's own cache
        pass


def pytest_collection(session):
    """Say so before collection builds the native dispatch layer (tests/test_native.py)."""
    from gems_core import native

    directory = native.build_directory().resolve()  # the kept folder, not the run's link
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and native.wanted() and not any(directory.glob("gems_native_*.so")):
        reporter.write_line(f"gems: building the native dispatch layer first (about a minute, "
                            f"once per torch version) in {directory}")


def pytest_collection_modifyitems(config, items):
    """``GEMS_TEST_SHARD=i/n`` keeps every n-th test starting at the i-th (0-based), so n
    processes can split a suite evenly (compiling kernels on a GPU host is CPU-bound)."""
    shard = os.environ.get("GEMS_TEST_SHARD")
    if not shard:
        return
    index, count = (int(part) for part in shard.split("/"))
    if not 0 <= index < count:
        raise ValueError(f"GEMS_TEST_SHARD={shard}: the index must be in 0..{count - 1}")
    kept = [item for i, item in enumerate(items) if i % count == index]
    config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % count != index])
    items[:] = kept
