"""A framework's caching allocator under the gate: the stand-in torch of
tests/bridge/fake (segments of 20 MiB from the simulated runtime, held by the
cache through fake_torch.rules); what the test keeps shows as the pool's
allocated bytes."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bridge", "fake"))
import torch  # noqa: E402  (the stand-in)

tensors = []


def test_keeps_a_tensor():
    tensors.append(torch.empty(1 << 20))


def test_drops_its_tensors():
    for _ in range(3):
        torch.empty(4 << 20)
