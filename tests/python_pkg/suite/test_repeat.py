"""@pytest.mark.repeat (pytest-repeat): a cache that keeps one more segment on
every repetition of the test fails it as growth from the third growing run."""
import pytest

import tensorleak
from conftest import cuda_malloc

pytest.importorskip("pytest_repeat")

cache = tensorleak.Pool("repeat-cache")


@pytest.mark.repeat(4)
def test_cache_grows_on_every_repeat():
    segment = cuda_malloc(1 << 20)
    cache.segment(segment, 1 << 20)
