"""Run by embed_late.c inside a CPython it dlopen()ed after its first
allocation.  gpu_malloc is the embedding program's own C function
(cudaMalloc of the simulated runtime); test_pyframes.py checks that the
leak is reported at these lines."""


def load_weights(size):
    gpu_malloc(size)  # EMBED-ALLOC-LINE  # noqa: F821 (given by embed_late.c)


def start_plugin():
    load_weights(3 << 20)  # EMBED-PLUGIN-LINE


start_plugin()  # EMBED-MODULE-LINE
