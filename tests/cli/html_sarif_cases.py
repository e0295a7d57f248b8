"""Cases for `tensorleak report --format html|sarif` (registered into cli_test.py).

The HTML page is checked as a document (parsed with html.parser): it is
self-contained, has every section, and its memory map has one rect per
segment, allocated block and free hole with data-bytes and a width in one
scale per pool. Under headless Chromium the page of a real caching_allocator
report is rendered to PNG and its DOM, after the page's script ran, gives the
rendered pixel width of every drawn range (data-rendered-width), which must be
proportional to its bytes. Without Chromium those cases exit 77 and say why.

Fixtures pool_oom.json and pool_exit.json are the two real reports of
`SIMCUDA_MEMORY=48M tensorleak run --sim -- samples/caching_allocator` (host,
pid and command line replaced): 2 segments x 20 MiB of 4 MiB blocks; at the
OOM, segment 0 holds blocks at 4 and 12 MiB, segment 1 at 0, 8 and 16 MiB; at
exit only the leaked block at 8 MiB of segment 1 is left.
"""
import html.parser
import json
import os
import shutil
import subprocess

MiB = 1 << 20


class Element:
    def __init__(self, tag, attrs, parents):
        self.tag = tag
        self.attrs = dict(attrs)
        self.parents = parents      # enclosing Elements, outermost first
        self.text = ""

    def classes(self):
        return (self.attrs.get("class") or "").split()

    def inside(self, tag, cls=None):
        return any(p.tag == tag and (cls is None or cls in p.classes()) for p in self.parents)


class Page(html.parser.HTMLParser):
    """Flat list of every element, with its ancestors and direct text."""
    VOID = {"meta", "link", "br", "img", "input", "hr"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.elements, self.stack = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs, list(self.stack))
        self.elements.append(e)
        if tag not in self.VOID:
            self.stack.append(e)

    def handle_startendtag(self, tag, attrs):
        self.elements.append(Element(tag, attrs, list(self.stack)))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        if self.stack:
            self.stack[-1].text += data

    def find(self, tag=None, cls=None):
        return [e for e in self.elements
                if (tag is None or e.tag == tag) and (cls is None or cls in e.classes())]


def holes_of(segment):
    """(offset, bytes) of the free ranges between the sorted blocks."""
    at, holes = 0, []
    for b in segment["blocks"] + [{"offset": segment["bytes"], "bytes": 0}]:
        if b["offset"] > at:
            holes.append((at, b["offset"] - at))
        at = b["offset"] + b["bytes"]
    return holes


def register(case, Failure, check_eq, SKIP):

    def html_of(c, files, name="page.html"):
        dest = os.path.join(c.tmp, name)
        c.expect(["report", "--format", "html", "-o", dest] + files, 0, stdout="", stderr="")
        with open(dest, encoding="utf-8") as f:
            return dest, f.read()

    def check_self_contained(text, page):
        for e in page.elements:
            for attr in ("src", "href", "xlink:href", "action"):
                v = e.attrs.get(attr)
                if v is not None and not v.startswith("#"):
                    raise Failure(f"<{e.tag} {attr}={v!r}> refers outside the page")
        for needle in ("http://", "https://", "@import", "url(http", "@font-face"):
            if needle in text.replace('xmlns="http://www.w3.org/2000/svg"', ""):
                raise Failure(f"page contains {needle!r}: not self-contained")

    def check_layout_map(page, report, where):
        """Every segment, block and hole of every pool, with its bytes and scaled width."""
        maps = [e for e in page.find("svg", "layout") if e.inside("section", "report")]
        pools = [p for p in report["pools"] if p.get("layout")]
        check_eq(len(maps), len(pools), f"{where}: layout maps")
        for svg, pool in zip(maps, pools):
            scale = float(svg.attrs["data-scale"])
            widest = max(s["bytes"] for s in pool["layout"])
            check_eq(round(scale * widest, 3), 960.0, f"{where}: widest segment fills the map")
            inner = [e for e in page.elements if svg in e.parents and e.tag == "rect"]

            def ranges(cls):
                return [(int(e.attrs["data-segment"]), int(e.attrs.get("data-offset", 0)),
                         int(e.attrs["data-bytes"]), float(e.attrs["width"]), e.classes())
                        for e in inner if cls in e.classes()]
            segs = ranges("segment")
            check_eq([(s, b) for s, _, b, _, _ in segs],
                     [(i, s["bytes"]) for i, s in enumerate(pool["layout"])],
                     f"{where}: segment rects")
            blocks = ranges("block")
            check_eq([(s, o, b) for s, o, b, _, _ in blocks],
                     [(i, b["offset"], b["bytes"]) for i, s in enumerate(pool["layout"])
                      for b in s["blocks"]], f"{where}: block rects")
            holes = ranges("hole")
            check_eq([(s, o, b) for s, o, b, _, _ in holes],
                     [(i, o, b) for i, s in enumerate(pool["layout"]) for o, b in holes_of(s)],
                     f"{where}: hole rects")
            for s, o, b, w, _ in segs + blocks + holes:
                if abs(w - b * scale) > 0.002:
                    raise Failure(f"{where}: range {s}+{o} of {b} bytes is {w} wide, "
                                  f"expected {b * scale:.3f}")
            largest = [h for h in holes if "largest" in h[4]]
            check_eq(len(largest), 1, f"{where}: holes marked largest")
            check_eq(largest[0][2], max(b for _, _, b, _, _ in holes),
                     f"{where}: the largest hole's bytes")
            check_eq(largest[0][2], pool["largest_free_block"],
                     f"{where}: largest hole = pool largest_free_block")

    @case
    def report_sarif_is_exact_for_leaks_invalid_frees_growth_and_oom(c):
        c.expect(["report", "--format", "sarif", "leaky.json"], 0, stderr="",
                 stdout_file="leaky.sarif")
        out, _ = c.expect(["report", "--format", "sarif", "server.json"], 0, stderr="",
                          stdout_file="server.sarif")
        log = json.loads(out)
        check_eq(log["version"], "2.1.0", "SARIF version")
        run = log["runs"][0]
        check_eq(run["tool"]["driver"]["version"], c.version, "driver version")
        ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
        for r in run["results"]:
            check_eq(ids[r["ruleIndex"]], r["ruleId"], "ruleIndex matches ruleId")
        check_eq(sorted({r["ruleId"] for r in run["results"]}),
                 ["tensorleak/growth", "tensorleak/oom"], "server.json rules")

    @case
    def report_sarif_locates_the_top_user_frame_relative_to_the_sources(c):
        out, _ = c.expect(["report", "--format", "sarif", "pool_exit.json"], 0, stderr="")
        result = json.loads(out)["runs"][0]["results"][0]
        check_eq(result["ruleId"], "tensorleak/leak", "rule")
        # Frame #0 is the inlined tensorleak_pool_alloc (include/tensorleak.h): skipped.
        loc = result["locations"][0]["physicalLocation"]
        check_eq((loc["artifactLocation"]["uri"], loc["region"]["startLine"]),
                 ("samples/caching_allocator.c", 91), "location")
        check_eq(result["properties"]["bytes"], 4 * MiB, "bytes")
        if "4194304 bytes" not in result["message"]["text"]:
            raise Failure(f"message without bytes: {result['message']['text']!r}")
        # Several reports: one run, each result tagged with its report.
        out, _ = c.expect(["report", "--format", "sarif", "leaky.json", "pool_exit.json"], 0)
        tags = [r["properties"]["report"] for r in json.loads(out)["runs"][0]["results"]]
        # Absolute paths outside the source root stay file URIs; under it, relative.
        out, _ = c.expect(["report", "--format", "sarif", "leaky.json"], 0)
        loc = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
        check_eq(loc["artifactLocation"], {"uri": "file:///abs/samples/leaky_inference.c"}, "uri")
        out, _ = c.expect(["report", "--format", "sarif", "--source-root", "/abs/", "leaky.json"], 0)
        loc = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
        check_eq(loc["artifactLocation"], {"uri": "samples/leaky_inference.c",
                                           "uriBaseId": "%SRCROOT%"}, "uri under --source-root")
        check_eq(tags, ["leaky.json"] * 4 + ["pool_exit.json"], "report tags (3 leaks, 1 invalid free; 1 leak)")

    @case
    def report_html_is_one_self_contained_page_with_every_section(c):
        _, text = html_of(c, ["pool_oom.json", "pool_exit.json"])
        page = Page(text)
        check_self_contained(text, page)
        check_eq(len(page.find("script")), 1, "script elements")
        check_eq([e.attrs["id"] for e in page.find("section", "report")],
                 ["report-1", "report-2"], "report sections, in order")
        check_eq(len(page.find("section", "sequence")), 1, "sequence section")
        seq_rows = [e for e in page.find("tr") if e.inside("section", "sequence")
                    and e.inside("tbody")]
        check_eq(len(seq_rows), 2, "sequence table rows")
        headings = [e.text for e in page.find("h3")]
        for h in ("Live call sites at this snapshot", "Top leaking call sites",
                  "Held by pools (not leaks)", "Memory map", "Out of memory"):
            if h not in headings:
                raise Failure(f"no heading {h!r} in {headings}")
        # Stacks collapse: every call site is a <details> with a <summary> and an <ol>.
        sites = page.find("details", "site")
        check_eq(len(sites), 4, "call-site details (live, held; leak, held)")
        for d in sites:
            if not [e for e in page.elements if d in e.parents and e.tag == "ol"]:
                raise Failure("a call site has no stack list")
        verdicts = " ".join(e.text for e in page.find("b"))
        for words in ("Leaked: 4.0 MiB in 1 allocation(s)", "Fragmented (0.80):",
                      "Fragmented (0.44):", "Out of memory:", "Reserved 40.0 MiB, allocated 4.0 MiB:"):
            if words not in verdicts:
                raise Failure(f"no verdict {words!r}")
        for name, where in (("pool_oom.json", "OOM report"), ("pool_exit.json", "exit report")):
            with open(os.path.join(c.src, name)) as f:
                report = json.load(f)
            one = Page(html_of(c, [name], "one.html")[1])
            check_layout_map(one, report, where)

    @case
    def report_html_without_a_layout_draws_allocated_and_free_in_proportion(c):
        with open(os.path.join(c.src, "leaky.json")) as f:
            pool = json.load(f)["pools"][0]
        page = Page(html_of(c, ["leaky.json"])[1])
        check_eq(page.find("svg", "layout"), [], "layout maps")
        svg = page.find("svg", "proportional")
        check_eq(len(svg), 1, "proportional bars")
        scale = float(svg[0].attrs["data-scale"])
        got = {cls: (int(e.attrs["data-bytes"]), float(e.attrs["width"]))
               for cls in ("allocated", "free") for e in page.find("rect", cls)}
        want_alloc, want_free = pool["allocated_bytes"], pool["reserved_bytes"] - pool["allocated_bytes"]
        check_eq((got["allocated"][0], got["free"][0]), (want_alloc, want_free), "bar bytes")
        check_eq(round(got["allocated"][1] + got["free"][1], 3), 960.0, "bar width")
        check_eq(round(got["allocated"][1], 3), round(want_alloc * scale, 3), "allocated width")

    @case
    def report_html_charts_the_marks_and_lists_growing_sites(c):
        with open(os.path.join(c.src, "server.json")) as f:
            report = json.load(f)
        page = Page(html_of(c, ["server.json"])[1])
        lines = {e.attrs["data-series"]: e.attrs["points"].split()
                 for e in page.find("polyline", "series")}
        check_eq(sorted(lines), ["device free", "live", "reserved"], "series")
        for name, pts in lines.items():
            check_eq(len(pts), len(report["marks"]), f"{name} points")
        live = [int(e.attrs["data-value"]) for e in page.find("circle", "live")]
        check_eq(live, [m["live_bytes"] for m in report["marks"]], "live values")
        check_eq(len(page.find("details", "growth")), len(report["growth"]), "growing sites")
        check_eq(len(page.find("div", "oom")), 1, "OOM box")

    @case
    def report_html_leaves_a_mark_of_unknown_device_free_out_of_its_chart(c):
        with open(os.path.join(c.src, "server.json")) as f:
            report = json.load(f)
        report["marks"] = [dict(report["marks"][0], seq=i + 1, label="request %d" % (i + 1), device_free=free)
                           for i, free in enumerate([9 * MiB, None, 8 * MiB, 7 * MiB])]
        path = os.path.join(c.tmp, "free_unknown.json")
        with open(path, "w") as f:
            json.dump(report, f)
        page = Page(html_of(c, [path])[1])
        runs = [e.attrs["points"].split() for e in page.find("polyline", "series")
                if e.attrs["data-series"] == "device free"]
        check_eq([len(r) for r in runs], [1, 2], "the line stops at the unknown mark")
        check_eq([int(e.attrs["data-value"]) for e in page.find("circle", "device-free-line")],
                 [9 * MiB, 8 * MiB, 7 * MiB], "a point per known mark")
        check_eq(sum("unknown at 1 mark," in e.text for e in page.find("p", "meta")), 1, "the unknown one said")

    @case
    def report_html_escapes_what_the_report_says(c):
        with open(os.path.join(c.src, "leaky.json")) as f:
            report = json.load(f)
        evil = "<script>alert(1)</script>&\"'"
        report["leaks"][0]["stack"][0]["function"] = evil
        report["pools"][0]["name"] = evil
        report["command"] = [evil]
        report["label"] = evil
        path = os.path.join(c.tmp, "evil.json")
        with open(path, "w") as f:
            json.dump(report, f)
        _, text = html_of(c, [path])
        if "<script>alert" in text:
            raise Failure("a report string reached the page unescaped")
        if "&lt;script&gt;alert(1)&lt;/script&gt;&amp;&quot;&#39;" not in text:
            raise Failure("escaped name missing")

    @case
    def report_rejects_a_pool_layout_that_does_not_add_up(c):
        with open(os.path.join(c.src, "pool_exit.json")) as f:
            report = json.load(f)
        seg = report["pools"][0]["layout"][1]
        bad = [("overlapping", [{"offset": 0, "bytes": 8 * MiB}, {"offset": 4 * MiB, "bytes": 1}],
                "pools[0].layout[1].blocks[1]: offset 4194304 overlaps or precedes the previous block"),
               ("past the end", [{"offset": 16 * MiB, "bytes": 8 * MiB}],
                "pools[0].layout[1].blocks[0]: block ends past the segment (20971520 bytes)"),
               ("no bytes", [{"offset": 0}],
                "pools[0].layout[1].blocks[0].bytes: missing (a non-negative integer expected)")]
        for what, blocks, msg in bad:
            seg["blocks"] = blocks
            path = os.path.join(c.tmp, "bad.json")
            with open(path, "w") as f:
                json.dump(report, f)
            c.expect(["report", "--format", "html", path], 2, stdout="",
                     stderr=f"tensorleak: {path}: {msg}\n")

    # --- in a real browser ----------------------------------------------

    def chromium():
        for name in ("chromium", "chromium-browser", "google-chrome"):
            path = shutil.which(name)
            if path:
                return path
        return None

    def browse(c, page_path, png):
        exe = chromium()
        common = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  "--window-size=1280,2000", "--user-data-dir=" + os.path.join(c.tmp, "chromium")]
        url = "file://" + page_path
        p = subprocess.run(common + ["--screenshot=" + png, url], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        if p.returncode != 0 or not os.path.exists(png) or os.path.getsize(png) < 10000:
            raise Failure(f"chromium screenshot failed ({p.returncode}): {p.stderr[-2000:]!r}")
        with open(png, "rb") as f:
            check_eq(f.read(8), b"\x89PNG\r\n\x1a\n", "screenshot is a PNG")
        p = subprocess.run(common + ["--dump-dom", url], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        if p.returncode != 0:
            raise Failure(f"chromium --dump-dom failed: {p.stderr[-2000:]!r}")
        return Page(p.stdout.decode("utf-8"))

    def check_rendered_to_scale(dom, report, where):
        """Rendered pixel widths: each segment and hole is bytes x one factor per map."""
        check_layout_map(dom, report, where)
        body = dom.find("body")[0]
        drawn = [e for e in dom.elements if "data-bytes" in e.attrs and e.inside("svg")]
        check_eq(body.attrs.get("data-rendered-ranges"), str(len(drawn)),
                 f"{where}: ranges measured by the page script")
        for svg in dom.find("svg", "layout"):
            rects = [e for e in dom.elements if svg in e.parents and "data-bytes" in e.attrs]
            segs = [e for e in rects if "segment" in e.classes()]
            px_per_byte = float(segs[0].attrs["data-rendered-width"]) / int(segs[0].attrs["data-bytes"])
            if float(segs[0].attrs["data-rendered-width"]) < 500:
                raise Failure(f"{where}: the widest segment is drawn only "
                              f"{segs[0].attrs['data-rendered-width']} px wide")
            for e in rects:
                want = int(e.attrs["data-bytes"]) * px_per_byte
                got = float(e.attrs["data-rendered-width"])
                # getBoundingClientRect includes half the stroke on each side.
                if abs(got - want) > 2.5:
                    raise Failure(f"{where}: {e.attrs['class']} at segment "
                                  f"{e.attrs['data-segment']}+{e.attrs.get('data-offset', 0)} "
                                  f"({e.attrs['data-bytes']} bytes) is {got} px, expected {want:.2f}")

    @case
    def html_with_a_pool_layout_renders_to_scale_in_chromium(c):
        if not chromium():
            print("skip: chromium is not installed (apt-get install -y chromium)")
            return SKIP
        for name in ("pool_oom.json", "pool_exit.json"):
            with open(os.path.join(c.src, name)) as f:
                report = json.load(f)
            page_path, _ = html_of(c, [name], name + ".html")
            dom = browse(c, page_path, os.path.join(c.tmp, name + ".png"))
            check_rendered_to_scale(dom, report, name)

    @case
    def html_of_a_real_caching_allocator_run_renders_in_chromium(c):
        if not chromium():
            print("skip: chromium is not installed (apt-get install -y chromium)")
            return SKIP
        sample = os.path.join(c.samples, "caching_allocator")
        for need in (c.library, os.path.join(c.sim_dir, "libcuda.so.1"), sample):
            if not os.path.exists(need):
                print(f"skip: {need} not built yet")
                return SKIP
        work = os.path.join(c.tmp, "real")
        os.makedirs(work)
        rc, out, err = c.run(["run", "--sim", "--quiet", "-o", os.path.join(work, "r.%n.json"),
                              "--", sample], cwd=work, env={"SIMCUDA_MEMORY": "48M"})
        check_eq(rc, 0, f"caching_allocator under run --sim (stderr: {err!r})")
        paths = [os.path.join(work, f) for f in ("r.1.json", "r.2.json")]
        reports = []
        for p in paths:
            with open(p) as f:
                reports.append(json.load(f))
        check_eq([r["reason"] for r in reports], ["oom", "exit"], "report reasons")
        page_path, _ = html_of(c, paths, "real.html")
        dom = browse(c, page_path, os.path.join(c.tmp, "real.png"))
        sections = dom.find("section", "report")
        check_eq(len(sections), 2, "report sections")
        pools = [e for e in dom.find("figure", "pool")]
        check_eq(len(pools), 2, "pool figures (one per report)")
        if not any(p.get("layout") for r in reports for p in r["pools"]):
            # What the page can draw today: allocated vs free of each pool, to scale.
            for fig, r in zip(pools, reports):
                rects = {cls: e for e in dom.elements if fig in e.parents
                         for cls in ("allocated", "free") if cls in e.classes()}
                check_eq((int(rects["allocated"].attrs["data-bytes"]),
                          int(rects["free"].attrs["data-bytes"])),
                         (r["pools"][0]["allocated_bytes"], r["pools"][0]["free_bytes"]),
                         "proportional bar")
            print("skip: the report has no pools[].layout yet (src/ writes only pool totals): "
                  "segments and holes cannot be checked; the proportional bars were")
            return SKIP
        for r, name in zip(reports, ("OOM report", "exit report")):
            check_eq([s["bytes"] for s in r["pools"][0]["layout"]], [20 * MiB, 20 * MiB],
                     f"{name}: 2 segments of 20 MiB")
        check_eq([len(s["blocks"]) for s in reports[1]["pools"][0]["layout"]], [0, 1],
                 "exit report: only the leaked block is left")
        for i, (r, name) in enumerate(zip(reports, ("OOM report", "exit report"))):
            one_path, _ = html_of(c, [paths[i]], f"real{i}.html")
            check_rendered_to_scale(browse(c, one_path, os.path.join(c.tmp, f"real{i}.png")),
                                    r, name)

    # --- owners and budgets -----------------------------------------------

    def check_owners_page(page, report, where):
        """Owners table, held-vs-leaked bar to scale, one colour per owner."""
        held, leaked = {}, {}
        for key, acc in (("held", held), ("leaks", leaked)):
            for e in report.get(key, []):
                if e.get("owner") and not (key == "leaks" and e.get("suppressed")):
                    acc[e["owner"]] = acc.get(e["owner"], 0) + e["bytes"]
        rows = [e for e in page.find("tr", "owner")]
        check_eq([(r.attrs["data-owner"], int(r.attrs["data-live"]), int(r.attrs["data-held"]),
                   int(r.attrs["data-leaked"])) for r in rows],
                 [(o["name"], o["live_bytes"], held.get(o["name"], 0), leaked.get(o["name"], 0))
                  for o in report["owners"]], f"{where}: owner rows")
        svg = page.find("svg", "owners-map")
        check_eq(len(svg), 1, f"{where}: held/leaked bar")
        scale = float(svg[0].attrs["data-scale"])
        parts = [e for e in page.elements if svg[0] in e.parents and e.tag == "rect"]
        want = ([(o["name"], "held", held[o["name"]]) for o in report["owners"] if held.get(o["name"])]
                + [(o["name"], "leaked", leaked[o["name"]]) for o in report["owners"] if leaked.get(o["name"])])
        check_eq([(e.attrs["data-owner"], e.classes()[1], int(e.attrs["data-bytes"])) for e in parts],
                 want, f"{where}: bar parts")
        check_eq(round(sum(float(e.attrs["width"]) for e in parts), 2), 960.0, f"{where}: bar width")
        for e in parts:
            if abs(float(e.attrs["width"]) - int(e.attrs["data-bytes"]) * scale) > 0.002:
                raise Failure(f"{where}: {e.attrs['data-owner']} part not to scale")
        # One colour per owner, wherever it is drawn; "user" is red.
        colours = {}
        for e in page.elements:
            name = e.attrs.get("data-owner")
            style = e.attrs.get("style", "")
            if name is None or not style:
                continue
            colour = style.split(":", 1)[1].strip()
            if colours.setdefault(name, colour) != colour:
                raise Failure(f"{where}: owner {name!r} drawn in {colours[name]} and {colour}")
        check_eq(colours.get("user"), "#d0452f", f"{where}: user colour")
        check_eq(len(set(colours.values())), len(colours), f"{where}: distinct owner colours")
        return colours

    @case
    def report_html_shows_owners_held_and_leaked(c):
        with open(os.path.join(c.src, "owners0.json")) as f:
            report = json.load(f)
        _, text = html_of(c, ["owners0.json"])
        page = Page(text)
        check_self_contained(text, page)
        check_owners_page(page, report, "owners0.json")
        headings = [e.text for e in page.find("h3")]
        for h in ("Owners", "Held by pools and owners (not leaks)"):
            if h not in headings:
                raise Failure(f"no heading {h!r} in {headings}")
        tags = [e.attrs["data-owner"] for e in page.find("span", "owner")]
        check_eq(tags, [l["owner"] for l in report["leaks"]] + [h["owner"] for h in report["held"]],
                 "owner tags on leaks then held sites")
        # The device bar splits this process's memory by owner (device kinds).
        proc = page.find("svg", "process-map")
        check_eq(len(proc), 1, "process-by-owner bar")
        parts = [(e.attrs.get("data-owner"), int(e.attrs["data-bytes"]))
                 for e in page.elements if proc[0] in e.parents and "data-bytes" in e.attrs]
        MiB_ = MiB
        check_eq(parts, [("user", 3 * MiB_), ("PyTorch caching allocator", 40 * MiB_),
                         ("NCCL", 8 * MiB_), (None, 45 * MiB_)], "process parts")
        verdicts = " ".join(e.text for e in page.find("b"))
        if "Budgets: 1 crossing(s), 0 allocation(s) refused" not in verdicts:
            raise Failure(f"no budget verdict in {verdicts!r}")
        # Reports without owners: no owners section, as before.
        page = Page(html_of(c, ["leaky.json"], "old.html")[1])
        check_eq(page.find("tr", "owner") + page.find("span", "owner"), [], "owners of an old report")

    @case
    def report_html_marks_budget_reports_on_the_sequence_chart(c):
        with open(os.path.join(c.src, "owners0.json")) as f:
            report = json.load(f)
        paths = []
        for i, (reason, label) in enumerate((("mark", "step"), ("budget", "cache"),
                                             ("budget", "device"), ("exit", None))):
            r = dict(report, reason=reason, label=label)
            paths.append(os.path.join(c.tmp, f"seq{i}.json"))
            with open(paths[-1], "w") as f:
                json.dump(r, f)
        page = Page(html_of(c, paths, "seq.html")[1])
        events = [e for e in page.find("line", "event") if e.inside("section", "sequence")]
        labels = [e.text for e in page.find("text", "event-label") if e.inside("section", "sequence")]
        check_eq([(e.attrs["data-index"], t) for e, t in zip(events, labels)],
                 [("1", "budget: cache"), ("2", "budget: device")], "budget events")
        points = [e for e in page.find("circle", "live") if e.inside("section", "sequence")]
        check_eq([e.attrs["x1"] for e in events], [f"{float(points[i].attrs['cx']):.1f}" for i in (1, 2)],
                 "events at their reports' x")
        rows = [e for e in page.find("tr", "budget") if e.inside("section", "sequence")]
        check_eq(len(rows), 2, "budget rows in the sequence table")
        crossed = [e for e in page.find("b") if e.text == "Budget crossed:"]
        check_eq(len(crossed), 2, "budget verdicts")

    @case
    def html_of_an_owners_run_renders_in_chromium(c):
        if not chromium():
            print("skip: chromium is not installed (apt-get install -y chromium)")
            return SKIP
        for need in (c.library, os.path.join(c.sim_dir, "libcuda.so.1"), c.owners_demo):
            if not need or not os.path.exists(need):
                print(f"skip: {need} not built yet")
                return SKIP
        work = os.path.join(c.tmp, "owners")
        os.makedirs(work)
        rc, _, err = c.run(["run", "--sim", "--quiet", "-o", os.path.join(work, "o.json"), "--",
                            c.owners_demo], cwd=work)
        check_eq(rc, 0, f"owners demo (stderr: {err!r})")
        with open(os.path.join(work, "o.json")) as f:
            report = json.load(f)
        check_eq({(o["name"], o["class"], o["live_bytes"]) for o in report["owners"]},
                 {("user", "user", 3 * MiB), ("PyTorch caching allocator", "cache", 40 * MiB),
                  ("NCCL", "library", 8 * MiB), ("cuBLASLt workspace", "workspace", 4 * MiB)},
                 "owners of the demo")
        page_path, _ = html_of(c, [os.path.join(work, "o.json")], "owners.html")
        dom = browse(c, page_path, os.path.join(c.tmp, "owners.png"))
        check_owners_page(dom, report, "owners demo")
        body = dom.find("body")[0]
        drawn = [e for e in dom.elements if "data-bytes" in e.attrs and e.inside("svg")]
        check_eq(body.attrs.get("data-rendered-ranges"), str(len(drawn)), "ranges measured")
        for cls in ("owners-map", "process-map"):
            svg = dom.find("svg", cls)[0]
            rects = [e for e in dom.elements if svg in e.parents and "data-bytes" in e.attrs]
            total = sum(int(e.attrs["data-bytes"]) for e in rects)
            px = sum(float(e.attrs["data-rendered-width"]) for e in rects)
            if px < 500:
                raise Failure(f"{cls} is drawn only {px} px wide")
            for e in rects:
                want = int(e.attrs["data-bytes"]) * px / total
                got = float(e.attrs["data-rendered-width"])
                if abs(got - want) > 2.5:
                    raise Failure(f"{cls}: {e.attrs.get('data-owner')} is {got} px, expected {want:.2f}")
