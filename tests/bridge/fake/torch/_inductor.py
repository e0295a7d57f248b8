"""Stands in for the import PyTorch's first snapshot of blocks with Python
frames does (torch 2.15.0 imports torch._inductor there: 873 modules,
0.95 s on the project's unloaded 2-core VM, over 2 s loaded): it takes
FAKE_TORCH_INDUCTOR_IMPORT_S seconds (default 0)."""
import os
import time

time.sleep(float(os.environ.get("FAKE_TORCH_INDUCTOR_IMPORT_S", "0")))
