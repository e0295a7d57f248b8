#!/usr/bin/env python3
"""Unit tests of the bridges' translation, driven by the allocator states
recorded on an H200 (tests/fixtures/h200-2026-11-30).  Every figure is the framework's own,
so each expected value is computed from the fixture by the rule the README
there states, and checked exactly."""
import gzip
import json
import os
import sys
import unittest

SOURCE = os.environ.get("TL_SOURCE") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "python"))
FIXTURES = os.path.join(SOURCE, "tests", "fixtures", "h200-2026-11-30")

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

    def test_largest_free_block_and_no_fragmentation_of_its_own(self):
        # A whole 20 MiB segment is inactive: the largest hole.  The library
        # computes fragmentation from it and free_bytes, as for every pool.
        self.assertEqual(self.row["largest_free_block"], 20 * MiB)
        self.assertNotIn("fragmentation", self.row)

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
        self.assertEqual(row["free_bytes"], 295698432 - 158466048)


class TorchAsync(unittest.TestCase):
    def test_stats_only_and_unknown_layout(self):
        d = fixture("torch_async_leak_stats.json")
        rows = tl_torch.pools_from({0: d["memory_stats"]}, RuntimeError(d["snapshot"]["error"]), "cudaMallocAsync")
        row = rows[0]
        self.assertEqual(row["framework"]["mode"], "cudaMallocAsync")
        self.assertEqual(row["reserved_bytes"], 369098752)
        self.assertEqual(row["allocated_bytes"], 158466048)
        self.assertIsNone(row["largest_free_block"])
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
                return {"current_bytes": 48 << 20, "current_count": 3, "peak_bytes": 64 << 20}

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
        self.assertEqual((row["peak_allocated_bytes"], row["peak_reserved_bytes"]), (64 << 20, None))
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
        self.assertEqual(first["free_bytes"], 112583507968 - 16 * MiB)

    def test_growing_pool(self):
        d = fixture("jax_grow_stats.json")
        rows = [tl_jax.pool(0, s) for s in d["per_request"]]
        self.assertEqual([r["allocated_bytes"] for r in rows], [16 * MiB * (i + 1) for i in range(8)])
        self.assertEqual({r["reserved_bytes"] for r in rows}, {287309824})
        self.assertEqual(rows[0]["framework"]["mode"], "growing")


class JaxProfile(unittest.TestCase):
    """Live arrays' Python sites from jax.profiler.device_memory_profile()
    (pprof, gzip'd) as recorded on the H200: 8 kept 2048x2048 f32 results
    (16 MiB each), 7 allocated at the recording script's line 60 itself and
    the first one inside the jit call it made there (compiled on first use).
    Files are as the recording machine named them: its site-packages, and
    the recording script, whose directory only that machine had: that
    frame's file is checked as one absolute path ending in the script's
    name, the same in every site."""
    SCRIPT = "fixtures.py"
    PKG = "/opt/torch/.venv/lib/python3.12/site-packages/jax/_src/"

    def named(self, path):
        """SCRIPT for the recording script's absolute path, any other file as it is."""
        script = path.startswith("/") and path.endswith("/" + self.SCRIPT) and not path.startswith(self.PKG)
        return self.SCRIPT if script else path

    def profile(self, name):
        with open(os.path.join(FIXTURES, name), "rb") as f:
            return f.read()

    def expected(self):
        inner = [("__call__", "interpreters/pxla.py", 420), ("wrapper", "profiler.py", 420),
                 ("_pjit_call_impl_python", "pjit.py", 1166), ("_run_python_pjit", "pjit.py", 142),
                 ("cache_miss", "pjit.py", 266), ("reraise_with_filtered_traceback", "traceback_util.py", 194)]
        return [(7 * 16 * MiB, 7, [(("<module>", self.SCRIPT, 60))]),
                (16 * MiB, 1, [(f, self.PKG + p, l) for f, p, l in inner] + [("<module>", self.SCRIPT, 60)])]

    def check(self, name, stats_name):
        sites = tl_jax.profile_sites(self.profile(name))
        self.assertEqual(list(sites), ["cuda:0"])
        outside = {f["file"] for s in sites["cuda:0"] for f in s["frames"] if not f["file"].startswith(self.PKG)}
        self.assertEqual(len(outside), 1, outside)
        got = [(s["bytes"], s["count"], [(f["function"], self.named(f["file"]), f["line"]) for f in s["frames"]])
               for s in sites["cuda:0"]]
        self.assertEqual(got, self.expected())
        self.assertTrue(all(f["python"] for s in sites["cuda:0"] for f in s["frames"]))
        # Every live buffer: JAX's own bytes_in_use after the 8th request.
        last = fixture(stats_name)["per_request"][-1]
        self.assertEqual(sum(s["bytes"] for s in sites["cuda:0"]), last["bytes_in_use"])
        self.assertEqual(sum(s["count"] for s in sites["cuda:0"]), len(fixture(stats_name)["live_arrays"]))

    def test_preallocated_profile(self):
        self.check("jax_prealloc_profile.pb.gz", "jax_prealloc_stats.json")

    def test_growing_profile(self):
        self.check("jax_grow_profile.pb.gz", "jax_grow_stats.json")

    def test_gunzipped_bytes_and_executables_left_out(self):
        raw = gzip.decompress(self.profile("jax_grow_profile.pb.gz"))
        self.assertEqual(tl_jax.profile_sites(raw), tl_jax.profile_sites(self.profile("jax_grow_profile.pb.gz")))
        # The profile also holds 4 compiled executables (0 bytes, no device
        # label): not arrays, so no site (check() counts 8 buffers, not 12).
        strings = [v for f, v in tl_jax._fields(raw) if f == 6]
        kinds = [strings[dict(tl_jax._fields(lab))[2]] for f, v in tl_jax._fields(raw) if f == 2
                 for g, lab in tl_jax._fields(v) if g == 3 and strings[dict(tl_jax._fields(lab))[1]] == b"kind"]
        self.assertEqual(sorted(kinds), [b"buffer", b"buffer", b"executable", b"executable", b"executable",
                                         b"executable"])

    def test_truncated_profile_raises(self):
        raw = gzip.decompress(self.profile("jax_grow_profile.pb.gz"))
        with self.assertRaises((ValueError, IndexError)):
            tl_jax.profile_sites(raw[:-3])

    def test_a_profile_over_the_limit_is_not_decoded(self):
        from unittest import mock
        data = self.profile("jax_grow_profile.pb.gz")
        self.assertEqual(len(gzip.decompress(data)), 2374)
        with mock.patch.object(tl_jax, "MAX_PROFILE_BYTES", 2374):
            self.assertEqual(len(tl_jax.profile_sites(data)["cuda:0"]), 2)
        with mock.patch.object(tl_jax, "MAX_PROFILE_BYTES", 2373):
            with self.assertRaisesRegex(ValueError, "sites are left out"):
                tl_jax.profile_sites(data)
        with self.assertRaisesRegex(ValueError, "cut short"):
            tl_jax.profile_sites(data[:-20])

    def stand_in(self, profile):
        import types
        calls = []

        class Device:
            id = local_hardware_id = 0
            platform = "gpu"

            def __str__(self):
                return "cuda:0"

            def memory_stats(self):
                return fixture("jax_grow_stats.json")["per_request"][-1]

        def device_memory_profile(backend=None):
            calls.append(backend)
            if isinstance(profile, Exception):
                raise profile
            return profile
        jax = types.SimpleNamespace(__version__="0.11.2", local_devices=lambda: [Device()],
                                    profiler=types.SimpleNamespace(device_memory_profile=device_memory_profile))
        return jax, calls

    def read(self, jax, **kw):
        import types
        from unittest import mock
        up = types.SimpleNamespace(_backends={"cuda": object()})
        with mock.patch.dict(sys.modules, {"jax._src.xla_bridge": up}):
            return tl_jax.read(jax, **kw)

    def test_full_reads_carry_the_sites_marks_do_not_ask(self):
        jax, calls = self.stand_in(self.profile("jax_grow_profile.pb.gz"))
        rows = self.read(jax)  # a mark: figures only
        self.assertEqual((len(rows), "sites" in rows[0], calls), (1, False, []))
        rows = self.read(jax, sites=True)
        self.assertEqual(calls, ["gpu"])
        self.assertEqual(rows[0]["allocated_bytes"], 8 * 16 * MiB)
        self.assertEqual([(s["bytes"], s["count"], self.named(s["frames"][0]["file"]), s["frames"][0]["line"])
                          for s in rows[0]["sites"]],
                         [(7 * 16 * MiB, 7, self.SCRIPT, 60), (16 * MiB, 1, self.PKG + "interpreters/pxla.py", 420)])
        json.dumps(rows)

    def test_a_failing_profile_keeps_the_figures_and_says_so(self):
        jax, calls = self.stand_in(RuntimeError("no heap profile"))
        errors = []
        rows = self.read(jax, sites=True, errors=errors)
        self.assertEqual((rows[0]["allocated_bytes"], "sites" in rows[0]), (8 * 16 * MiB, False))
        self.assertEqual(errors, ["jax: device_memory_profile: RuntimeError: no heap profile"])

    def test_the_bridge_asks_for_sites_in_full_states_only(self):
        jax, calls = self.stand_in(self.profile("jax_prealloc_profile.pb.gz"))
        import types
        from unittest import mock
        up = types.SimpleNamespace(_backends={"cuda": object()})
        with mock.patch.dict(sys.modules, {"jax._src.xla_bridge": up}):
            mark = bridge.read_state(modules={"jax": jax}, full=False)
            report = bridge.read_state(modules={"jax": jax}, full=True)
        self.assertEqual(("sites" in mark["pools"][0], len(report["pools"][0]["sites"]), calls), (False, 2, ["gpu"]))


class Cupy(unittest.TestCase):
    def test_device_pool_per_request(self):
        d = fixture("cupy_pool_stats.json")
        for r in d["per_request"]:
            row = tl_cupy.device_pool(0, r["used"], r["total"], r["free_blocks"], d["cupy"])
            self.assertEqual((row["reserved_bytes"], row["allocated_bytes"], row["free_bytes"]),
                             (r["total"], r["used"], r["total"] - r["used"]))
            self.assertIsNone(row["largest_free_block"])
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
