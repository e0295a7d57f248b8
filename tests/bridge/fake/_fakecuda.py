"""Device memory from the simulated runtime for the stand-in frameworks."""
import ctypes
import os

rt = ctypes.CDLL(os.environ.get("FAKE_CUDART", "libcudart.so.13"))
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
rt.cudaMalloc.restype = ctypes.c_int
rt.cudaMemGetInfo.argtypes = (ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
rt.cudaMemGetInfo.restype = ctypes.c_int
rt.cudaFree.argtypes = (ctypes.c_void_p,)
rt.cudaFree.restype = ctypes.c_int


def malloc(nbytes):
    p = ctypes.c_void_p()
    if rt.cudaMalloc(ctypes.byref(p), nbytes) != 0:
        raise MemoryError("out of device memory (simulated)")
    return p.value


def total_memory():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
    return total.value


class Arena:
    """First-fit blocks inside segments; freed blocks are kept and merged."""

    def __init__(self, round_to=256):
        self.round_to = round_to
        self.segments = []  # [base, size, blocks: [[addr, size, used]]]

    def reserved(self):
        return sum(s[1] for s in self.segments)

    def used(self):
        return sum(b[1] for s in self.segments for b in s[2] if b[2])

    def free_blocks(self):
        return [b[1] for s in self.segments for b in s[2] if not b[2]]

    def add_segment(self, size):
        base = malloc(size)
        self.segments.append([base, size, [[base, size, False]]])

    def alloc(self, nbytes, segment_size):
        size = max(self.round_to, (nbytes + self.round_to - 1) // self.round_to * self.round_to)
        for attempt in range(2):
            for s in self.segments:
                blocks = s[2]
                for i, b in enumerate(blocks):
                    if not b[2] and b[1] >= size:
                        if b[1] > size:
                            blocks.insert(i + 1, [b[0] + size, b[1] - size, False])
                            b[1] = size
                        b[2] = True
                        return b[0]
            if attempt == 0:
                self.add_segment(segment_size(size))
        raise MemoryError("arena")

    def release_all(self):
        """Gives every segment back to the driver (the framework shutting down)."""
        for s in self.segments:
            rt.cudaFree(s[0])
        self.segments = []

    def free(self, addr):
        for s in self.segments:
            blocks = s[2]
            for i, b in enumerate(blocks):
                if b[0] == addr:
                    b[2] = False
                    if i + 1 < len(blocks) and not blocks[i + 1][2]:
                        b[1] += blocks.pop(i + 1)[1]
                    if i > 0 and not blocks[i - 1][2]:
                        blocks[i - 1][1] += blocks.pop(i)[1]
                    return
