"""A framework's caching allocator under the gate: the stand-in torch of
tests/bridge/fake (segments of 20 MiB from the simulated runtime, held by the
cache through fake_torch.rules); what the test keeps shows as the pool's
allocated bytes, with the line of the test's block from PyTorch's
allocation history."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bridge", "fake"))
import torch  # noqa: E402  (the stand-in)

tensors = []


def test_drops_its_tensors():
    # First: CUDA is initialized here, so the bridge turns the allocation
    # history on (TENSORLEAK_TORCH_HISTORY=1) before the next test.
    for _ in range(3):
        torch.empty(4 << 20)


def test_keeps_a_tensor():
    tensors.append(torch.empty(1 << 20))
