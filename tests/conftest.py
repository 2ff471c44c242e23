import os
import tempfile

# Tests run on the built-in cpu backend unless GEMS_DEVICE says otherwise, with a cache of
# their own so generated kernels and tuning choices do not leak between runs.
os.environ.setdefault("GEMS_CACHE_DIR", tempfile.mkdtemp(prefix="gems-test-cache-"))
