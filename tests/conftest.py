import os
import tempfile

# Tests run on the built-in cpu backend unless GEMS_DEVICE says otherwise, with a cache of
# their own so generated kernels and tuning choices do not leak between runs.
os.environ.setdefault("GEMS_CACHE_DIR", tempfile.mkdtemp(prefix="gems-test-cache-"))


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
