"""Real PyTorch under `pytest --tensorleak --tensorleak-sim`, run by
../test_torch_tools.py, which asserts which tests pass and fail and what the
failure says (line numbers included: keep the allocations where they are)."""
import torch

kept = []


def test_initializes_cuda_and_drops_its_tensors():
    # First: CUDA is initialized here, so the bridge turns torch's allocation
    # history on (TENSORLEAK_TORCH_HISTORY=1) before the next test.
    for _ in range(3):
        torch.empty((4 << 20,), dtype=torch.uint8, device="cuda")


def test_keeps_a_tensor():
    kept.append(torch.empty((1 << 20,), dtype=torch.uint8, device="cuda"))


def test_copies_through_the_device_and_frees():
    host = torch.arange(1024, dtype=torch.int32)
    assert torch.equal(host.to("cuda").cpu(), host)


def test_frees_a_tensor_larger_than_a_segment():
    del_me = torch.empty((24 << 20,), dtype=torch.uint8, device="cuda")
    del del_me
