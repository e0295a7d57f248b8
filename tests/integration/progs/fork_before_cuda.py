"""Forks before any CUDA call, with warnings shown: CPython 3.12+ warns when
a multi-threaded process forks, and tensorleak must add no thread before the
program touches the GPU."""
import os, warnings
warnings.simplefilter("default")
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("forked")
