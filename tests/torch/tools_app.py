#!/usr/bin/env python3
"""Real PyTorch holding still for tensorleak's tools, driven by
tests/torch/test_torch_tools.py.

usage: tools_app.py FIGURES_FILE GO_FILE

Builds the fragmented pool of torch_app.py, writes torch's own figures for
it (torch_app.pool_figures()) to FIGURES_FILE (atomically), then allocates
nothing more and waits for GO_FILE to exist, so that the live view, the
exporter and the exit report all see the pool torch described.
"""
import json
import os
import sys
import time

from torch_app import fragmented_pool, pool_figures


def main():
    figures_file, go_file = sys.argv[1], sys.argv[2]
    kept = fragmented_pool()
    figures = pool_figures()
    with open(figures_file + ".tmp", "w") as f:
        json.dump(figures, f)
    os.rename(figures_file + ".tmp", figures_file)
    while not os.path.exists(go_file):
        time.sleep(0.05)
    print(json.dumps(figures), flush=True)
    return kept


if __name__ == "__main__":
    held = main()  # alive until exit: the exit report sees the same pool
