"""A pass's index arrays go to the device as views of one buffer (runner.to_device_aligned): every view
starts 16 bytes aligned whatever the lengths before it, and holds its array's values."""
from __future__ import annotations

import numpy as np
import torch

from gpu_worker.runner import to_device_aligned


def test_every_view_is_16_byte_aligned_and_holds_its_array():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lens = rng.integers(0, 9, rng.integers(1, 7)).tolist()
        xs = [torch.from_numpy(rng.integers(-5, 1 << 40, n)) for n in lens]
        views = to_device_aligned(xs, "cpu")
        assert [v.numel() for v in views] == lens
        for x, v in zip(xs, views):
            assert v.dtype == torch.int64 and torch.equal(v, x)
            assert v.data_ptr() % 16 == 0, (lens, [w.data_ptr() % 16 for w in views])


def test_arrays_of_odd_lengths_share_one_buffer():
    views = to_device_aligned([torch.arange(3), torch.arange(5), torch.arange(1)], "cpu")
    assert views[0].untyped_storage().data_ptr() == views[2].untyped_storage().data_ptr()
    assert [v.storage_offset() for v in views] == [0, 4, 10]
