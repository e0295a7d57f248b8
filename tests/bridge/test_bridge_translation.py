#!/usr/bin/env python3
"""Unit tests of the bridges' translation, driven by the allocator states
recorded on an H200 (shared/fixtures/h200-2026-11-30, beside the source tree:
../shared from the repository root).  Every figure is the framework's own,
so each expected value is computed from the fixture by the rule the README
there states, and checked exactly."""
import gzip
import json
import os
import sys
import unittest

SOURCE = os.environ.get("TL_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "python"))
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(SOURCE)), "shared", "fixtures", "h200-2026-11-30")

from tensorleak import bridge  # noqa: E402
from tensorleak.frameworks import cupy as tl_cupy  # noqa: E402
from tensorleak.frameworks import jax as tl_jax  # noqa: E402
from tensorleak.frameworks import torch as tl_torch  # noqa: E402

MiB = 1 << 20


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as f:
        return json.load(f)


class TorchNative(unittest.TestCase):
    def setUp(self):
        self.d = fixture("torch_native_leak_snapshot.json")
        rows = tl_torch.pools_from({0: self.d["memory_stats"]}, self.d["snapshot"], "native", self.d["torch"])
        self.assertEqual(len(rows), 1)
        self.row = rows[0]

    def test_reserved_and_allocated_are_the_allocators(self):
        segs = self.d["snapshot"]["segments"]
        self.assertEqual(self.row["reserved_bytes"], sum(s["total_size"] for s in segs))
        self.assertEqual(self.row["reserved_bytes"], self.d["memory_stats"]["reserved_bytes.all.current"])
        self.assertEqual(self.row["reserved_bytes"], 312475648)
        self.assertEqual(self.row["allocated_bytes"], sum(s["allocated_size"] for s in segs))
        self.assertEqual(self.row["allocated_bytes"], 160598016)
        self.assertEqual(self.row["free_bytes"], 312475648 - 160598016)

    def test_largest_free_block_and_fragmentation(self):
        # A whole 20 MiB segment is inactive: the largest hole.
        self.assertEqual(self.row["largest_free_block"], 20 * MiB)
        self.assertAlmostEqual(self.row["fragmentation"], 1 - 20 * MiB / (312475648 - 160598016), places=12)
        self.assertEqual(round(self.row["fragmentation"], 2), 0.86)

    def test_layout_has_every_segment_and_the_active_blocks(self):
        segs = self.d["snapshot"]["segments"]
        self.assertEqual(self.row["segments"], 16)
        self.assertEqual(len(self.row["layout"]), 16)
        self.assertEqual([l["base"] for l in self.row["layout"]], sorted(s["address"] for s in segs))
        placed = sum(b["bytes"] for l in self.row["layout"] for b in l["blocks"])
        self.assertEqual(placed, 160598016)
        for l in self.row["layout"]:
            for b in l["blocks"]:
                self.assertTrue(0 <= b["offset"] and b["offset"] + b["bytes"] <= l["bytes"])
        self.assertFalse(self.row["layout_truncated"])
        self.assertEqual(self.row["framework"], {"name": "torch", "version": "2.11.0+cu130", "mode": "native"})

    def test_live_blocks_are_named_by_their_python_line(self):
        # The KV cache's keys (line 146) and values (line 147) of
        # transformers' DynamicLayer.update: the two sites, by bytes.
        sites = self.row["sites"]
        tops = [(s["frames"][0]["function"], s["frames"][0]["file"].rsplit("site-packages/", 1)[1],
                 s["frames"][0]["line"], s["frames"][0]["python"], s["bytes"], s["count"]) for s in sites]
        self.assertEqual(tops, [("update", "transformers/cache_utils.py", 146, True, 63723520, 36),
                                ("update", "transformers/cache_utils.py", 147, True, 62271488, 36)])
        blocks = [b for s in self.d["snapshot"]["segments"] for b in s["blocks"]
                  if b["state"] == "active_allocated" and b["frames"]]
        self.assertEqual(sum(s["count"] for s in sites), len(blocks))
        self.assertEqual(sum(s["bytes"] for s in sites), sum(b["size"] for b in blocks))
        self.assertEqual(len(sites[0]["frames"]), min(32, len(blocks[0]["frames"])))

    def test_the_row_is_json_for_the_library(self):
        json.dumps(self.row)


class TorchExpandable(unittest.TestCase):
    def test_one_growing_segment(self):
        d = fixture("torch_expandable_leak_snapshot.json")
        row = tl_torch.pools_from({0: d["memory_stats"]}, d["snapshot"], "native")[0]
        self.assertEqual(row["framework"]["mode"], "expandable_segments")
        self.assertEqual(row["reserved_bytes"], 295698432)
        self.assertEqual(row["allocated_bytes"], 158466048)
        self.assertEqual(row["segments"], 2)
        largest = max(b["size"] for s in d["snapshot"]["segments"] for b in s["blocks"] if b["state"] == "inactive")
        self.assertEqual(row["largest_free_block"], largest)
        self.assertEqual(largest, 99090432)
        self.assertAlmostEqual(row["fragmentation"], 1 - 99090432 / (295698432 - 158466048), places=12)


class TorchAsync(unittest.TestCase):
    def test_stats_only_and_unknown_layout(self):
        d = fixture("torch_async_leak_stats.json")
        rows = tl_torch.pools_from({0: d["memory_stats"]}, RuntimeError(d["snapshot"]["error"]), "cudaMallocAsync")
        row = rows[0]
        self.assertEqual(row["framework"]["mode"], "cudaMallocAsync")
        self.assertEqual(row["reserved_bytes"], 369098752)
        self.assertEqual(row["allocated_bytes"], 158466048)
        self.assertIsNone(row["largest_free_block"])
        self.assertIsNone(row["fragmentation"])
        self.assertNotIn("layout", row)


class TorchDevices(unittest.TestCase):
    def test_one_row_per_device_that_holds_memory(self):
        # The H200 snapshot's segments, half of them moved to device 1; a
        # third device never allocated on gets no row.
        d = fixture("torch_native_leak_snapshot.json")
        snap = json.loads(json.dumps(d["snapshot"]))
        for i, seg in enumerate(snap["segments"]):
            seg["device"] = i % 2
        by_dev = {k: [s for s in snap["segments"] if s["device"] == k] for k in (0, 1)}
        stats = {k: {"reserved_bytes.all.current": sum(s["total_size"] for s in by_dev[k]),
                     "allocated_bytes.all.current": sum(s["allocated_size"] for s in by_dev[k])} for k in (0, 1)}
        stats[2] = {"reserved_bytes.all.current": 0, "allocated_bytes.all.current": 0}
        rows = tl_torch.pools_from(stats, snap, "native")
        self.assertEqual([(r["name"], r["device"], len(r["layout"])) for r in rows],
                         [("torch cuda:0", 0, 8), ("torch cuda:1", 1, 8)])
        self.assertEqual(sum(r["reserved_bytes"] for r in rows), 312475648)
        self.assertEqual(sum(r["allocated_bytes"] for r in rows), 160598016)
        for r, k in zip(rows, (0, 1)):
            self.assertEqual(sum(b["bytes"] for l in r["layout"] for b in l["blocks"]), stats[k]["allocated_bytes.all.current"])


class Rmm(unittest.TestCase):
    def test_statistics_adaptor_over_a_pool(self):
        class Pool:
            def pool_size(self):
                return 256 << 20

        class Stats:
            upstream_mr = Pool()

            def get_allocation_counts(self):
                return {"current_bytes": 48 << 20, "current_count": 3}

        class rmm:
            __version__ = "test"

            class mr:
                @staticmethod
                def get_current_device_resource():
                    return Stats()
        from tensorleak.frameworks import rmm as tl_rmm
        row = tl_rmm.read(rmm)[0]
        self.assertEqual((row["kind"], row["reserved_bytes"], row["allocated_bytes"], row["free_bytes"]),
                         ("rmm", 256 << 20, 48 << 20, 208 << 20))
        self.assertIsNone(row["largest_free_block"])


class Jax(unittest.TestCase):
    def test_preallocated_pool(self):
        d = fixture("jax_prealloc_stats.json")
        for stats in d["per_request"]:
            row = tl_jax.pool(0, stats, d["jax"])
            self.assertEqual(row["reserved_bytes"], stats["pool_bytes"])
            self.assertEqual(row["allocated_bytes"], stats["bytes_in_use"])
            self.assertEqual(row["largest_free_block"], stats["largest_free_block_bytes"])
            self.assertEqual(row["framework"]["mode"], "preallocated")
        first = tl_jax.pool(0, d["per_request"][0])
        self.assertEqual(first["reserved_bytes"], 112583507968)  # 104.85 GiB
        self.assertEqual(first["allocated_bytes"], 16 * MiB)
        self.assertEqual(first["largest_free_block"], 112549953280)  # 104.7 GiB
        self.assertAlmostEqual(first["fragmentation"], 1 - 112549953280 / (112583507968 - 16 * MiB), places=12)

    def test_growing_pool(self):
        d = fixture("jax_grow_stats.json")
        rows = [tl_jax.pool(0, s) for s in d["per_request"]]
        self.assertEqual([r["allocated_bytes"] for r in rows], [16 * MiB * (i + 1) for i in range(8)])
        self.assertEqual({r["reserved_bytes"] for r in rows}, {287309824})
        self.assertEqual(rows[0]["framework"]["mode"], "growing")


class Cupy(unittest.TestCase):
    def test_device_pool_per_request(self):
        d = fixture("cupy_pool_stats.json")
        for r in d["per_request"]:
            row = tl_cupy.device_pool(0, r["used"], r["total"], r["free_blocks"], d["cupy"])
            self.assertEqual((row["reserved_bytes"], row["allocated_bytes"], row["free_bytes"]),
                             (r["total"], r["used"], r["total"] - r["used"]))
            self.assertIsNone(row["largest_free_block"])
            self.assertIsNone(row["fragmentation"])
            self.assertEqual(row["free_blocks"], r["free_blocks"])

    def test_the_fixture_pool_has_the_api_read_uses(self):
        attrs = set(fixture("cupy_pool_stats.json")["pool_attrs"])
        self.assertTrue({"used_bytes", "total_bytes", "n_free_blocks"} <= attrs)


class NeverImports(unittest.TestCase):
    def test_only_imported_frameworks_are_read(self):
        before = set(sys.modules)
        state = bridge.read_state(modules={})
        self.assertEqual(state["pools"], [])
        self.assertEqual(state["errors"], [])
        for name in ("torch", "jax", "cupy", "rmm"):
            self.assertNotIn(name, set(sys.modules) - before)

    def test_a_framework_still_being_imported_is_left_alone(self):
        import types
        half = types.ModuleType("torch")
        half.__spec__ = types.SimpleNamespace(_initializing=True)  # what import sets meanwhile
        half.cuda = types.SimpleNamespace()  # torch.cuda half-built: no is_initialized yet
        state = bridge.read_state(modules={"torch": half})
        self.assertEqual((state["pools"], state["errors"]), ([], []))

    def test_a_failing_framework_is_an_error_line_not_an_exception(self):
        class Broken:
            class cuda:
                @staticmethod
                def is_initialized():
                    raise RuntimeError("boom")
        state = bridge.read_state(modules={"torch": Broken})
        self.assertEqual(state["errors"], ["torch: RuntimeError: boom"])


if __name__ == "__main__":
    unittest.main()
