"""An uninstrumented PyTorch loop for the end-to-end attach test: it never
imports tensorleak and runs under `tensorleak sim` (the simulated driver,
untracked).  4 MiB taken before it says "ready" (memory from before the
attach, in torch's first 20 MiB segment); each `req` keeps 3 MiB more (the
leak, at the line marked below) and answers "served K"; `q` exits 0."""
import sys

import torch


def main():
    kept = []
    warm = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")  # noqa: F841
    print("ready", flush=True)
    for line in sys.stdin:
        if line == "req\n":
            kept.append(torch.empty(3 << 20, dtype=torch.uint8, device="cuda"))  # LEAK
            print(f"served {len(kept)}", flush=True)
        elif line == "q\n":
            break


main()
