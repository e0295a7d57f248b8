#!/usr/bin/env python3
"""The report contract: docs/report.schema.json, checked against real reports.

Programs run under libtensorleak.so on the simulated CUDA stack (samples,
the integration suite's programs, the Python-frame and bridge suites' Python
programs on the stand-in frameworks), `tensorleak merge` and `tensorleak
report --format json` run on their reports, and every report produced is
validated with jsonschema's Draft202012Validator.  The schema declares every
field (additionalProperties false on every object), so a field written but
not declared fails here, and it requires every field a report of this
version always holds, at every level, so a field not written fails too.
Reports of earlier versions (the CLI's fixtures) are held to its
$defs/any_version.  Each case is a function; meson runs one per process
(`schema_test.py NAME`).
Exit 77 (skipped) when jsonschema is not installed.
"""
import copy
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

try:
    import jsonschema
    import referencing
except ImportError:
    print("SKIP: python module jsonschema is not installed (scripts/install-deps.sh installs it)")
    sys.exit(77)

BUILD = os.environ["TL_BUILD"]
SOURCE = os.environ["TL_SOURCE"]
LIB = os.environ["TL_LIB"]
SIM = os.environ["TL_SIM"]
PROGS = os.environ["TL_PROGS"]
CLI = os.path.join(BUILD, "tools", "tensorleak")
SCHEMA_PATH = os.path.join(SOURCE, "docs", "report.schema.json")
FORMAT_DOC = os.path.join(SOURCE, "docs", "report-format.md")
BRIDGE = os.path.join(SOURCE, "tests", "bridge")
FAKE = os.path.join(BRIDGE, "fake")

# Fixtures the CLI must refuse: each is broken in its own way, and none may
# pass the schema either.  Every other fixture is a report and must pass it.
BROKEN_FIXTURES = {
    "tests/cli/array.json": "top level is an array",
    "tests/cli/badtype.json": "a byte count that is a string",
    "tests/cli/empty.json": "empty file",
    "tests/cli/foreign.json": "another tool's report",
    "tests/cli/nonutf8.json": "not UTF-8",
    "tests/cli/schema2.json": "a schema this tensorleak does not read",
    "tests/cli/truncated.json": "cut short",
}


# The integration suite's assertions (it reads the same TL_* paths).
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
from preload_test import check, eq, fail, prog, sample  # noqa: E402


def load_schema():
    with open(SCHEMA_PATH) as f:
        return json.load(f)


def dumped_tables(program):
    """The tables a dump program of tests/schema prints (dump_tables.c,
    dump_live_tables.c)."""
    p = subprocess.run([os.path.join(BUILD, "tests", "schema", program)], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0, f"{program}: {p.stderr}")
    return json.loads(p.stdout)


def validators():
    """(the schema: a report of this version, its $defs/any_version: a
    report of any version) as validators."""
    schema = load_schema()
    registry = referencing.Registry().with_resource(schema["$id"], referencing.Resource.from_contents(schema))
    any_version = {"$schema": schema["$schema"], "$ref": schema["$id"] + "#/$defs/any_version"}
    return jsonschema.Draft202012Validator(schema), jsonschema.Draft202012Validator(any_version, registry=registry)


def leaves(error):
    """An error, or for an anyOf none of whose schemas matched (an object or
    null) the errors of the schemas that were not null's."""
    if error.validator == "anyOf" and error.context:
        inner = [c for c in error.context if not (c.validator == "type" and c.validator_value == "null")]
        if inner:
            return [leaf for c in inner for leaf in leaves(c)]
    return [error]


def problems(validator, report):
    out = []
    errors = [leaf for e in validator.iter_errors(report) for leaf in leaves(e)]
    for e in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        out.append(f"{path or '(root)'}: {e.message[:300]}")
    return out


class Reports:
    """Reports collected from runs, each with where it came from."""

    def __init__(self):
        self.items = []  # (what, path, report)

    def add_dir(self, what, tmp):
        found = 0
        for name in sorted(os.listdir(tmp)):
            path = os.path.join(tmp, name)
            if not name.endswith(".json"):
                continue
            with open(path) as f:
                self.items.append((what, path, json.load(f)))
            found += 1
        return found

    def validate(self, minimum_reports):
        schema, _ = validators()
        bad = []
        for what, path, rep in self.items:
            for p in problems(schema, rep):
                bad.append(f"{what} ({os.path.basename(path)}, reason {rep.get('reason')}): {p}")
        for line in bad[:40]:
            print(line)
        check(not bad, f"{len(bad)} schema violation(s) in {len(self.items)} reports")
        check(len(self.items) >= minimum_reports, f"only {len(self.items)} reports produced, {minimum_reports} expected")
        print(f"{len(self.items)} reports valid against {os.path.relpath(SCHEMA_PATH, SOURCE)}")
        self.round_trip()

    def round_trip(self):
        """Each report read into the report model and written back
        (`tensorleak report --format json`) is the report: the same fields
        in the same order with the same values (numbers to 1e-12, the CLI
        writing 15 significant digits)."""
        differ = []
        for what, path, _ in self.items:
            p = subprocess.run([CLI, "report", "--format", "json", path], capture_output=True, text=True, timeout=60)
            check(p.returncode == 0, f"{what}: report --format json {os.path.basename(path)}: {p.stderr}")
            with open(path) as f:
                written = json.load(f, object_pairs_hook=list)
            back = json.loads(p.stdout, object_pairs_hook=list)
            where = same_document(written, back, "")
            if where:
                differ.append(f"{what} ({os.path.basename(path)}): {where}")
        for line in differ[:20]:
            print(line)
        check(not differ, f"{len(differ)} of {len(self.items)} reports differ once read into the model and written back")
        print(f"{len(self.items)} reports read into the model and written back unchanged")


def same_document(a, b, where):
    """Where two documents (objects as lists of pairs) first differ, or None."""
    if isinstance(a, float) or isinstance(b, float):
        ok = isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-12 * max(1, abs(a))
        return None if ok else f"{where}: {a!r} then {b!r}"
    if type(a) is not type(b):
        return f"{where}: {a!r:.60} then {b!r:.60}"
    if isinstance(a, tuple):
        if a[0] != b[0]:
            return f"{where}: field {a[0]!r} then {b[0]!r}"
        return same_document(a[1], b[1], f"{where}.{a[0]}")
    if isinstance(a, list):
        if a and all(isinstance(x, tuple) for x in a) and b and all(isinstance(x, tuple) for x in b):
            # The CLI demangles a C++ name the program left mangled (no C++
            # runtime loaded there): the mangled name becomes "symbol".
            fa, fb = dict(a), dict(b)
            if "symbol" in fb and "symbol" not in fa and fb["symbol"] == fa.get("function", "").strip() and \
                    str(fa.get("function")).startswith("_Z"):
                b = [(k, fa["function"] if k == "function" else v) for k, v in b if k != "symbol"]
        if len(a) != len(b):
            keys = lambda x: [k for k, _ in x] if all(isinstance(e, tuple) for e in x) else len(x)
            return f"{where}: {keys(a)} then {keys(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            w = same_document(x, y, where if isinstance(x, tuple) else f"{where}[{i}]")
            if w:
                return w
        return None
    return None if a == b else f"{where}: {a!r:.60} then {b!r:.60}"


def clean_env(extra=None):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith(("TENSORLEAK_", "SIMCUDA_")) or k in ("LD_PRELOAD", "PYTHONPATH", "RANK"):
            del e[k]
    e.update(extra or {})
    return e


def run_preload(reports, what, cmd, env=None, expect_reports=1):
    """Runs cmd under the bare preload; its reports go to `reports`."""
    tmp = tempfile.mkdtemp(prefix="tl-schema-")
    e = clean_env({"LD_LIBRARY_PATH": SIM, "LD_PRELOAD": LIB, "TENSORLEAK_QUIET": "1",
                   "TENSORLEAK_OUTPUT": os.path.join(tmp, "tl.%p.%n.json")})
    e.update(env or {})
    subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    n = reports.add_dir(what, tmp)
    check(n == expect_reports, f"{what}: {n} report(s), {expect_reports} expected")
    return tmp


def run_cli(reports, what, args, env=None, expect_reports=1, timeout=90):
    """`tensorleak run --sim -- python3 ARGS` (the bridge is on) with env."""
    tmp = tempfile.mkdtemp(prefix="tl-schema-")
    e = clean_env(env)
    cmd = [CLI, "run", "--sim", "--quiet", "-o", os.path.join(tmp, "tl.%p.%n.json"), "--", sys.executable, *args]
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    n = reports.add_dir(what, tmp)
    check(n >= expect_reports, f"{what}: {n} report(s), {expect_reports} expected; stderr: {p.stderr[-500:]}")
    return tmp


def spawn_waiting(reports, what, env, signals=0, expect_reports=1):
    """it_wait_signal (prints "ready", waits for stdin to close) with env,
    sent `signals` SIGUSR1 snapshots, then ended."""
    tmp = tempfile.mkdtemp(prefix="tl-schema-")
    e = clean_env({"LD_LIBRARY_PATH": SIM, "LD_PRELOAD": LIB, "TENSORLEAK_QUIET": "1",
                   "TENSORLEAK_OUTPUT": os.path.join(tmp, "r.%n.json")})
    e.update(env)
    p = subprocess.Popen([os.path.join(PROGS, "it_wait_signal")], env=e, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    check(p.stdout.readline().strip() == "ready", f"{what}: program started")
    deadline = time.time() + 20
    for i in range(signals):
        p.send_signal(signal.SIGUSR1)
        while len(os.listdir(tmp)) < i + 1 and time.time() < deadline:
            time.sleep(0.01)
    while len([x for x in os.listdir(tmp) if x.endswith(".json")]) < expect_reports and time.time() < deadline:
        time.sleep(0.01)
    p.stdin.close()
    p.wait(timeout=20)
    n = reports.add_dir(what, tmp)
    check(n >= expect_reports + 1, f"{what}: {n} report(s), {expect_reports + 1} expected")


# ---- cases -------------------------------------------------------------------

def every_declared_field_is_documented_and_the_schema_is_draft_2020_12():
    schema = load_schema()
    eq_schema = schema.get("$schema")
    check(eq_schema == "https://json-schema.org/draft/2020-12/schema", f"$schema is draft 2020-12: {eq_schema}")
    jsonschema.Draft202012Validator.check_schema(schema)
    with open(FORMAT_DOC) as f:
        doc = f.read()
    names, closed, objects = set(), 0, 0

    def walk(node):
        nonlocal closed, objects
        if isinstance(node, dict):
            if "properties" in node and node.get("type") == "object":
                objects += 1
                closed += node.get("additionalProperties") is False
                names.update(node["properties"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk({k: v for k, v in schema.items() if k != "$defs"})
    walk({k: v for k, v in schema["$defs"].items() if not k.endswith("_as_written") and k != "any_version"})
    check(objects > 0 and closed == objects, f"{objects - closed} of {objects} objects accept undeclared fields")
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    check(not missing, f"fields declared in the schema but not documented in docs/report-format.md: {missing}")
    print(f"{len(names)} field names in {objects} closed objects, each documented")


def the_summary_field_table_is_the_schemas_summary():
    """src/model/model.h's TL_SUMMARY_FIELDS, which the library's writer, the
    reader and merge walk, declares exactly the schema's summary fields,
    each with the schema's type and nullability."""
    with open(os.path.join(SOURCE, "src", "model", "model.h")) as f:
        header = f.read()
    block = re.search(r"#define TL_SUMMARY_FIELDS\(X\)(.*?)\n\n", header, re.S)
    check(block, "TL_SUMMARY_FIELDS found in src/model/model.h")
    table = re.findall(r"X\((\w+), (U64|REAL), (\w+), (\w+)\)", block.group(1))
    check(len(table) == block.group(1).count("X("), "every line of the table parsed")
    props = load_schema()["properties"]["summary"]["properties"]
    names = [t[0] for t in table]
    check(len(set(names)) == len(names), "no field twice in the table")
    check(set(names) == set(props),
          f"table and schema differ: only in the table {sorted(set(names) - set(props))}, "
          f"only in the schema {sorted(set(props) - set(names))}")
    for name, ctype, flags, merge in table:
        spec = props[name]
        ref = spec.get("$ref", "").rsplit("/", 1)[-1]
        nullable = ref.endswith("_or_unknown")
        check(nullable == (flags == "NULLABLE"), f"{name}: NULLABLE in the table iff null in the schema ({ref})")
        if ctype == "REAL":
            check(ref.startswith("fraction"), f"{name}: a number in both ({ref})")
        else:
            check(ref.startswith(("bytes", "count")) or spec.get("type") == "integer", f"{name}: an integer in both")
        check(merge in ("SUM", "MAX", "NONE", "OWN"), f"{name}: merge rule {merge}")
    print(f"{len(table)} summary fields, one table, as the schema declares them")


class SchemaObjects:
    """The schema's object of each table of the model (dump_tables' names:
    "report", "site", "ipc.mapped", ...), through $refs and anyOf."""

    def __init__(self, schema):
        self.schema, self.defs = schema, schema["$defs"]

    def deref(self, node):
        while "$ref" in node:
            node = dict(self.defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"})
        return node

    def variants(self, node):
        node = self.deref(node)
        if "anyOf" in node:
            return [v for a in node["anyOf"] for v in self.variants(a)]
        return [node]

    def object_of(self, node):
        for v in self.variants(node):
            if v.get("type") == "object" or "properties" in v:
                return v
            if v.get("type") == "array" or (isinstance(v.get("type"), list) and "array" in v["type"]):
                return self.object_of(v["items"])
        return None

    def of(self, name):
        if name == "report":
            return self.schema
        if name in self.defs:
            return self.object_of(self.defs[name])
        head, *rest = name.split(".")
        node = self.defs[head] if head in self.defs else self.schema["properties"][head]
        node = self.object_of(node) if head in self.defs else node
        for part in rest:
            node = self.object_of(node)["properties"][part]
        return self.object_of(node)


def every_table_of_the_model_is_the_schemas_object():
    """src/model/report_fields.c's tables, which the reader and the writer walk,
    declare exactly the fields of the schema's objects, each with the
    schema's type, nullability and (for required fields) requiredness."""
    tables = dumped_tables("dump_tables")
    schema = load_schema()
    objects = SchemaObjects(schema)
    deref, variants, schema_object = objects.deref, objects.variants, objects.of

    def kinds(node):
        out = set()
        for v in variants(node):
            t = v.get("type")
            if isinstance(t, list):
                out.update(t)
            elif t:
                out.add(t)
            elif "enum" in v or "const" in v:
                vals = v.get("enum", [v.get("const")])
                out.update("null" if x is None else "boolean" if isinstance(x, bool) else
                           "string" if isinstance(x, str) else "integer" for x in vals)
        return out

    want = {"u64": {"integer"}, "int": {"integer"}, "real": {"number"}, "bool": {"boolean"}, "string": {"string"},
            "strings": {"array"}, "object": {"object"}, "list": {"array"}, "hex": {"string"}}
    fields, wrong = 0, []

    def agree(ok, what):
        if not ok:
            wrong.append(what)

    for name, table in tables.items():
        obj = schema_object(name)
        check(obj is not None, f"table {name}: no such object in the schema")
        props = obj["properties"]
        names = [f["name"] for f in table]
        agree(set(names) == set(props),
              f"table {name}: only in the table {sorted(set(names) - set(props))}, "
              f"only in the schema {sorted(set(props) - set(names))}")
        for f in table:
            k = kinds(props[f["name"]])
            where = f"{name}.{f['name']}"
            agree(f["nullable"] == ("null" in k), f"{where}: nullable in the table iff null in the schema ({k})")
            agree(k - {"null"} <= want[f["type"]] | ({"integer"} if f["type"] == "real" else set()),
                  f"{where}: {f['type']} in the table, {sorted(k)} in the schema")
            if f["required"]:
                agree(f["name"] in obj.get("required", []), f"{where}: required in the table, not in the schema")
            if (f["type"] == "u64" or f["nonneg"]) and not f["gap"]:
                minimum = [deref(v).get("minimum") for v in variants(props[f["name"]]) if deref(v).get("type") != "null"]
                agree(all(m is not None and m >= 0 for m in minimum), f"{where}: non-negative in the table, "
                      f"minimum {minimum} in the schema")
            fields += 1
    for w in wrong:
        print(w)
    check(not wrong, f"{len(wrong)} difference(s) between the tables and the schema")
    eq(len(tables), 30, "tables dumped (every object of a report has one)")
    print(f"{len(tables)} tables, {fields} fields, each the schema's")


def always_written(schema, tables):
    """{object: the fields every report of this version holds there, in the
    table's order}: the object's own definition's `required` and its
    X_as_written's, for each table of the model ("site.shared" is
    site_shared_as_written), "report" the library's reports and "merged"
    merge's (the root's `required` and report_as_written's or
    merged_as_written's)."""
    defs, objects = schema["$defs"], SchemaObjects(schema)
    out = {}
    for name in list(tables) + ["merged"]:
        table = tables["report" if name == "merged" else name]
        base = schema["required"] if name in ("report", "merged") else objects.of(name).get("required", [])
        extra = defs.get(name.replace(".", "_") + "_as_written", {}).get("required", [])
        out[name] = [f["name"] for f in table if f["name"] in set(base) | set(extra)]
    return out


def instances(tables, obj, table="report", path=""):
    """(table, path, object) for the object and every object below it, by
    the tables' list and object fields."""
    yield table, path, obj
    fields = {f["name"]: f for f in tables[table]}
    for key, value in obj.items():
        f = fields.get(key)
        if not f or not f["table"] or value is None:
            continue
        for i, e in enumerate(value if f["type"] == "list" else [value]):
            yield from instances(tables, e, f["table"], f"{path}.{key}[{i}]" if f["type"] == "list" else f"{path}.{key}")


def every_field_a_report_always_holds_is_required():
    """The schema's requirements held to the model's tables (dump_tables):
    for each table, what its object's definition and its X_as_written
    require are fields of the table, never both; every other field of the
    table is named (`field`) in the X_as_written's description, which says
    when it is written.  A field added to a table is therefore either
    required or declared as written only sometimes; that the library and
    merge write every required field is the producing cases' validation.
    Each X_as_written refers to its children's, so no object below a report
    is left out; the summary's are TL_SUMMARY_FIELDS but those merge alone
    writes (OWN); a field both the library's and merge's reports hold is
    required at the root."""
    tables, schema = dumped_tables("dump_tables"), load_schema()
    defs, objects = schema["$defs"], SchemaObjects(schema)
    wrong = []

    def agree(ok, what):
        if not ok:
            wrong.append(what)

    eq({k: schema[k] for k in ("if", "then", "else")},
       {"if": {"properties": {"reason": {"const": "merge"}}, "required": ["reason"]},
        "then": {"$ref": "#/$defs/merged_as_written"}, "else": {"$ref": "#/$defs/report_as_written"}},
       "the root holds merge's reports to merged_as_written, the others to report_as_written")
    names = {n.replace(".", "_") for n in tables} | {"merged"}
    eq(sorted(n for n in defs if n.endswith("_as_written") and n[:-len("_as_written")] not in names), [],
       "X_as_written of no table")
    for name in list(tables) + ["merged"]:
        table = tables["report" if name == "merged" else name]
        fields = [f["name"] for f in table]
        d = defs.get(name.replace(".", "_") + "_as_written", {})
        base = schema["required"] if name in ("report", "merged") else objects.of(name).get("required", [])
        extra = d.get("required", [])
        agree(not set(base) & set(extra), f"{name}: required twice: {sorted(set(base) & set(extra))}")
        agree(len(set(extra)) == len(extra), f"{name}: a field twice in its X_as_written")
        agree(set(base) | set(extra) <= set(fields), f"{name}: requires what its table lacks: "
              f"{sorted(set(base) | set(extra) - set(fields))}")
        named = re.findall(r"`(\w+)`", d.get("description", ""))
        optional = [f for f in fields if f not in set(base) | set(extra)]
        agree(sorted(named) == sorted(optional), f"{name}: fields neither required nor named as written only sometimes "
              f"{sorted(set(optional) - set(named))}, named but required or not its {sorted(set(named) - set(optional))}")
        children = {f["name"]: f for f in table if f["table"]}
        if name == "merged":  # below merge's top level, only its own ranks
            children = {"ranks": children["ranks"]}
        want = {}
        for key, f in children.items():
            child = f["table"].replace(".", "_") + "_as_written"
            if child in defs:
                ref = {"$ref": "#/$defs/" + child}
                want[key] = {"items": ref} if f["type"] == "list" else ref
        agree(d.get("properties", {}) == want, f"{name}: refers to {d.get('properties', {})}, its children's are {want}")
    report, merged = (defs[n].get("required", []) for n in ("report_as_written", "merged_as_written"))
    agree(not set(report) & set(merged), f"held by both, yet not required at the root: {sorted(set(report) & set(merged))}")
    with open(os.path.join(SOURCE, "src", "model", "model.h")) as f:
        summary = re.findall(r"X\((\w+), (?:U64|REAL), \w+, (\w+)\)", f.read())
    eq(always_written(schema, tables)["summary"], [n for n, merge in summary if merge != "OWN"],
       "the library's summary: every field of TL_SUMMARY_FIELDS but merge's own")
    any_version = defs["any_version"]
    eq({k: any_version.get(k) for k in ("type", "required", "additionalProperties")},
       {"type": "object", "required": ["tool", "schema", "summary"], "additionalProperties": False},
       "$defs/any_version requires what tensorleak's reader needs")
    eq(any_version["properties"], {k: {"$ref": "#/properties/" + k} for k in schema["properties"]},
       "$defs/any_version declares the root's fields")
    for w in wrong:
        print(w)
    check(not wrong, f"{len(wrong)} difference(s) between the tables and what the schema requires")
    counts = {n: len(f) for n, f in always_written(schema, tables).items()}
    print(f"required: {sum(counts.values())} fields in {len(counts)} objects; at the root {len(schema['required'])} "
          f"of {len(schema['properties'])}, {counts['report']} in the library's reports, {counts['merged']} in merge's")


def a_report_without_a_field_it_always_holds_fails():
    """Each field a report of this version always holds, taken out of a
    report that has it, at every level the reports below reach (the first
    object of each table): the schema finds exactly that field missing
    there, nothing else; $defs/any_version takes the report unless
    tensorleak's reader needs the field too (then it finds the same)."""
    r = Reports()
    run_preload(r, "caching_allocator", [sample("caching_allocator")], {"SIMCUDA_MEMORY": "48M"},
                expect_reports=2)  # its out-of-memory report and the exit report
    run_preload(r, "async_pool never answered", [sample("async_pool"), "10"], {"SIMCUDA_POOL_QUERY": "fail"})
    run_preload(r, "double_free", [prog("double_free")])
    run_preload(r, "ipc", [prog("ipc"), "runtime"], expect_reports=2)
    run_preload(r, "vmm_share pair", [prog("vmm_share"), "pair"], expect_reports=2)
    run_cli(r, "torch", [os.path.join(BRIDGE, "progs", "kv_loop.py"), "leak", "6", "ctypes"],
            {"PYTHONPATH": FAKE, "TENSORLEAK_TORCH_HISTORY": "1"})
    with open(os.path.join(SOURCE, "tests", "cli", "expected", "ranks.merged.json")) as f:
        merged = json.load(f)  # what tensorleak merge writes (tests/cli checks it byte for byte)
    tables, schema = dumped_tables("dump_tables"), load_schema()
    strict, any_version = validators()
    needs = always_written(schema, tables)
    objects = SchemaObjects(schema)
    reader = {name: set(schema["required"] if name in ("report", "merged") else objects.of(name).get("required", []))
              for name in needs}
    reader["report"] = reader["merged"] = {"tool", "schema", "summary"}
    firsts = {}
    for rep in [rep for _, _, rep in sorted(r.items, key=lambda x: x[1])] + [merged]:
        for table, path, obj in instances(tables, rep):
            table = "merged" if table == "report" and rep["reason"] == "merge" else table
            if rep["reason"] == "merge" and table not in ("merged", "ranks"):
                continue  # entries merge keeps as its inputs wrote them
            firsts.setdefault(table, (rep, path))
    # Not reached here: attach's objects (tests/attach holds its reports to
    # the schema) and exported_by (merge's pairing of IPC reports).
    eq(sorted(firsts), sorted(set(needs) - {"attach", "before_attach", "ipc.mapped.exported_by"}), "objects reached")
    tried = 0
    for table, (rep, path) in sorted(firsts.items()):
        for field in needs[table]:
            if table == "merged" and field == "reason":
                continue  # without a reason a report is held as the library's (report_as_written)
            bad = copy.deepcopy(rep)
            target = bad
            for step in re.findall(r"\.(\w+)(?:\[(\d+)\])?", path):
                target = target[step[0]] if not step[1] else target[step[0]][int(step[1])]
            del target[field]
            missing = [f"{path or '(root)'}: '{field}' is a required property"]
            eq(problems(strict, bad), missing, f"{table} without {field}")
            eq(problems(any_version, bad), missing if field in reader[table] else [],
               f"{table} without {field}, as a report of any version")
            tried += 1
    eq(tried, sum(len(needs[t]) for t in firsts) - 1, "fields taken out")
    print(f"{tried} fields taken out of {len(firsts)} objects, each found missing")


LIVE_SCHEMA_PATH = os.path.join(SOURCE, "docs", "live.schema.json")
# What only the live file has, per object of docs/live.schema.json; every
# other field of it is a field of the model that its table marks live.
LIVE_ONLY = {
    "report": {"kind", "marks", "growth", "owner_classes", "ipc", "budgets", "live"},
    "pool": set(),
    "growth": {"site", "since_mark"},
}


def load_live_schema():
    with open(LIVE_SCHEMA_PATH) as f:
        return json.load(f)


def the_live_files_own_parts_are_the_readers_tables():
    """What only the live file has (LIVE_ONLY) is read by tables of the
    readers' own (tools/live_read.c): each declares exactly the fields the
    live schema gives that object, of the schema's type."""
    tables, live = dumped_tables("dump_live_tables"), load_live_schema()
    props = live["properties"]
    objects = {
        "live": props["live"],
        "marks": props["marks"],
        "growth": live["$defs"]["growth"],
        "ipc.devices": props["ipc"]["properties"]["devices"]["items"],
        "budgets": props["budgets"]["items"],
    }
    eq(set(tables), set(objects) | {"owner_classes"}, "the readers' tables")
    json_types = {"u64": "integer", "int": "integer", "real": "number", "string": "string", "bool": "boolean"}
    for name, obj in objects.items():
        declared = set(obj["properties"])
        if name == "growth":  # the report's growth row, plus the live file's own fields
            declared &= LIVE_ONLY["growth"]
        eq({f["name"] for f in tables[name]}, declared, f"live {name}: the reader's table")
        for f in tables[name]:
            node = obj["properties"][f["name"]]
            types = node["type"] if isinstance(node["type"], list) else [node["type"]]
            check(json_types[f["type"]] in types, f"live {name}.{f['name']}: {f['type']} is not {types}")
            if f["type"] == "u64":
                check(node.get("minimum", -1) >= 0, f"live {name}.{f['name']}: u64 without minimum 0")
    # Owner classes: any class name to an integer; the reader knows the four.
    eq(props["owner_classes"]["additionalProperties"], {"type": "integer"}, "live owner_classes")
    eq(sorted(f["name"] for f in tables["owner_classes"]), sorted(["user", "cache", "library", "workspace"]),
       "live owner_classes: the reader's table")
    check(all(f["type"] == "int" for f in tables["owner_classes"]), "live owner_classes: integers")


def the_live_schema_is_the_fields_the_tables_mark_live():
    """docs/live.schema.json declares exactly the fields the model's tables
    mark live (TL_FIELD_LIVE) plus the live file's own, each referring to the
    report schema's field of that name; it is Draft 2020-12 and resolves
    against docs/report.schema.json."""
    tables, live = dumped_tables("dump_tables"), load_live_schema()
    jsonschema.Draft202012Validator.check_schema(live)
    report = load_schema()
    objects = {"report": (live, ""), "pool": (live["$defs"]["pool"], "/$defs/pool"),
               "growth": (live["$defs"]["growth"], "/$defs/growth")}
    marked_objects = set()
    for name, table in tables.items():
        if any(f["live"] for f in table):
            marked_objects.add(name)
    eq(marked_objects, set(objects), "tables that mark fields live")
    written = always_written(report, tables)
    for name, (obj, path) in objects.items():
        marked = {f["name"] for f in tables[name] if f["live"]}
        props = set(obj["properties"])
        eq(props - LIVE_ONLY[name], marked, f"live {name}: the fields its table marks live")
        check(obj.get("additionalProperties") is False, f"live {name}: additionalProperties false")
        # What a report always holds there, of the fields the file carries.
        eq(set(obj.get("required", [])) - LIVE_ONLY[name], set(written[name]) & marked, f"live {name}: required")
        for f in tables[name]:
            if not f["live"]:
                continue
            node = obj["properties"][f["name"]]
            if f["table"] in objects:  # a list of objects the live file projects too
                eq(node.get("items", {}).get("$ref"), "#/$defs/" + f["table"], f"live {name}.{f['name']}: items")
                continue
            eq(node.get("$ref"), "urn:tensorleak:report:1#" + path + "/properties/" + f["name"],
               f"live {name}.{f['name']}: the report's field")
            # An object the file carries whole: what a report always holds in it.
            child = f["table"] and f["table"].replace(".", "_") + "_as_written"
            if child in report["$defs"]:
                ref = {"$ref": "urn:tensorleak:report:1#/$defs/" + child}
                eq(node.get("items") if f["type"] == "list" else (node.get("allOf") or [None])[0], ref,
                   f"live {name}.{f['name']}: what a report always holds there")
    # Every reference resolves in the report schema.
    registry = referencing.Registry().with_resource(report["$id"], referencing.Resource.from_contents(report))
    resolver = registry.resolver()
    for name, (obj, _) in objects.items():
        for field, node in obj["properties"].items():
            if "$ref" in node and node["$ref"].startswith("urn:"):
                resolver.lookup(node["$ref"])
    print(f"{sum(len(o['properties']) for o, _ in objects.values())} live fields, each the model's or the live file's own")


def reports_of_the_samples_and_test_programs_match_the_schema():
    r = Reports()
    owners = {"LD_LIBRARY_PATH": PROGS + ":" + SIM}
    # Plain leak with growth; stacks off; the gate failing; a suppression.
    run_preload(r, "leaky_inference", [sample("leaky_inference"), "8"])
    run_preload(r, "leaky_inference depth 0", [sample("leaky_inference"), "3"], {"TENSORLEAK_DEPTH": "0"})
    supp = os.path.join(tempfile.mkdtemp(prefix="tl-schema-"), "supp.txt")
    with open(supp, "w") as f:
        f.write("leak:kv_cache_append\n")
    run_preload(r, "leaky_inference gated, suppressed", [sample("leaky_inference"), "4"],
                {"TENSORLEAK_FAIL_ON": "leak,growth", "TENSORLEAK_SUPPRESSIONS": supp})
    run_preload(r, "leaky_inference gated", [sample("leaky_inference"), "3"], {"TENSORLEAK_FAIL_ON": "leak"})
    # Clean exit, every runtime path.
    run_preload(r, "clean_inference", [sample("clean_inference"), "5"],
                {"TENSORLEAK_FAIL_ON": "leak,growth,invalid-free,oom"})
    run_preload(r, "static_runtime", [sample("static_runtime")])
    run_preload(r, "driver_api", [sample("driver_api")])
    # Pools: annotated, stream-ordered (also with the driver failing at exit
    # and never answering), VMM.
    run_preload(r, "caching_allocator", [sample("caching_allocator")], {"SIMCUDA_MEMORY": "48M"},
                expect_reports=2)  # its out-of-memory report and the exit report
    run_preload(r, "buffer_pool", [sample("buffer_pool"), "20"])
    run_preload(r, "buffer_pool misuse", [sample("buffer_pool"), "--misuse", "5"])
    run_preload(r, "async_pool", [sample("async_pool"), "10"])
    run_preload(r, "async_pool last good", [sample("async_pool"), "10"], {"SIMCUDA_POOL_QUERY": "fail-at-exit"})
    run_preload(r, "async_pool never answered", [sample("async_pool"), "10"], {"SIMCUDA_POOL_QUERY": "fail"})
    run_preload(r, "vmm_expandable", [sample("vmm_expandable")])
    run_preload(r, "vmm_expandable clean", [sample("vmm_expandable"), "--clean"])
    # Sleep, wake and unload: a snapshot per state, one chunk leaked.
    run_preload(r, "sleep_wake forget", [sample("sleep_wake"), "--forget"], expect_reports=8)
    # CUDA arrays whose size the driver does not report: bytes null.
    run_preload(r, "families arrays of unknown size", [prog("families"), "array"],
                {"SIMCUDA_ARRAY_REQUIREMENTS": "deferred-only"})
    # OOM, invalid frees, teardown, plateau, budgets, owners.
    run_preload(r, "oom", [prog("oom")], {"SIMCUDA_MEMORY": "64M"}, expect_reports=2)
    run_preload(r, "double_free", [prog("double_free")])
    run_preload(r, "teardown", [prog("teardown")])
    run_preload(r, "plateau", [prog("plateau")])
    run_preload(r, "budget", [prog("budget_demo")], {"TENSORLEAK_BUDGET": "4M"}, expect_reports=3)
    run_preload(r, "budget enforced", [prog("budget_demo"), "enforce"],
                {"TENSORLEAK_BUDGET": "4M", "TENSORLEAK_BUDGET_ENFORCE": "1"}, expect_reports=2)
    run_preload(r, "owners", [prog("owners_demo")], owners)
    run_preload(r, "owner class budget", [prog("owners_demo")], dict(owners, TENSORLEAK_BUDGET="cache:32M,user:2M"),
                expect_reports=3)
    run_preload(r, "owner_torch expandable", [prog("owner_torch")],
                dict(owners, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"))
    run_preload(r, "owner_torch marks", [prog("owner_torch"), "marks"], owners)
    run_preload(r, "owner_nvlibs", [prog("owner_nvlibs")], owners)
    # CUDA IPC: the exporter's and the importer's report.
    run_preload(r, "ipc", [prog("ipc"), "runtime"], expect_reports=2)
    # A snapshot to a path of the program's choice, then exit.
    tmp = run_preload(r, "snap_exit", [prog("snap_exit"), os.path.join(tempfile.mkdtemp(prefix="tl-schema-"), "to.json")],
                      expect_reports=2)
    # Interval snapshots on a timer, SIGUSR1 snapshots.
    spawn_waiting(r, "interval", {"TENSORLEAK_INTERVAL": "0.05"}, expect_reports=3)
    spawn_waiting(r, "sigusr1", {}, signals=3, expect_reports=3)
    reasons = {rep["reason"] for _, _, rep in r.items}
    check({"api", "budget", "exit", "interval", "oom", "signal"} <= reasons, f"reasons covered: {sorted(reasons)}")
    kinds = {p["kind"] for _, _, rep in r.items for p in rep["pools"]}
    check({"annotated", "stream_ordered"} <= kinds, f"pool kinds covered: {kinds}")
    check(any(rep["repairs"] for _, _, rep in r.items), "a report with repairs")
    check(any(rep["oom"] for _, _, rep in r.items), "a report with an oom")
    check(any(rep["invalid_frees"] for _, _, rep in r.items), "a report with invalid frees")
    check(any(l["kind"] == "vmm_reservation" for _, _, rep in r.items for l in rep["leaks"]), "an address-space leak")
    check(any(l["kind"] == "array" and l["bytes"] is None for _, _, rep in r.items for l in rep["leaks"]),
          "a leak of unknown size")
    check(any(rep["ipc"]["exported"] for _, _, rep in r.items) and any(rep["ipc"]["mapped"] for _, _, rep in r.items),
          "an IPC export and an IPC mapping")
    r.validate(minimum_reports=42)


def reports_of_the_stand_in_frameworks_match_the_schema():
    r = Reports()
    kv = os.path.join(BRIDGE, "progs", "kv_loop.py")
    jc = os.path.join(BRIDGE, "progs", "jax_cupy_loop.py")
    fake = {"PYTHONPATH": FAKE}
    history = dict(fake, TENSORLEAK_TORCH_HISTORY="1")
    run_cli(r, "torch leak", [kv, "leak", "6", "ctypes"], fake)
    run_cli(r, "torch leak, history", [kv, "leak", "6", "ctypes"], history)
    run_cli(r, "torch two lines", [kv, "kv2", "6", "ctypes"], history)
    rules = os.path.join(tempfile.mkdtemp(prefix="tl-schema-"), "owners.rules")
    with open(rules, "w") as f:
        f.write("owner:fake-torch:cache:device:libffi.so*\n")
    run_cli(r, "torch rotating segments", [kv, "rotate", "9", "ctypes"], dict(fake, TENSORLEAK_OWNERS=rules))
    run_cli(r, "torch interval", [kv, "leak", "4", "none"], dict(fake, TENSORLEAK_INTERVAL="0.3", KV_SLEEP="0.5"),
            expect_reports=2)
    run_cli(r, "torch sigusr1", [kv, "leak", "3", "ctypes"], dict(fake, KV_SIGNAL_SELF="1"), expect_reports=2)
    run_cli(r, "torch broken", [kv, "leak", "3", "ctypes"], dict(fake, FAKE_TORCH_BROKEN="1"))
    run_cli(r, "torch budget", [kv, "leak", "6", "ctypes"], dict(fake, TENSORLEAK_BUDGET="100M"), expect_reports=2)
    run_cli(r, "jax preallocated", [jc, "jax", "leak", "6"], fake)
    run_cli(r, "jax growing", [jc, "jax", "leak", "6"], dict(fake, XLA_PYTHON_CLIENT_PREALLOCATE="false"))
    run_cli(r, "cupy", [jc, "cupy", "leak", "6"], fake)
    kinds = {p["kind"] for _, _, rep in r.items for p in rep["pools"]}
    check({"pytorch", "jax", "cupy", "cupy_pinned"} <= kinds, f"framework pool kinds covered: {kinds}")
    scopes = {g.get("scope") for _, _, rep in r.items for g in rep["growth"]}
    check({"call_site", "pool", "owner", "python_site"} <= scopes, f"growth scopes covered: {scopes}")
    check(any(p.get("sites") for _, _, rep in r.items for p in rep["pools"]), "a pool with Python sites")
    check(any(rep["bridge"] and rep["bridge"]["errors"] for _, _, rep in r.items), "a bridge with errors")
    r.validate(minimum_reports=14)


def python_frames_and_forked_children_match_the_schema():
    r = Reports()
    app = os.path.join(SOURCE, "tests", "python", "leaky_app.py")
    for mode in ("cdll", "thread", "growth"):
        run_preload(r, f"leaky_app {mode}", [sys.executable, app, mode])
    fork_chain = os.path.join(BRIDGE, "progs", "fork_chain.py")
    tmp = run_cli(r, "fork chain", [fork_chain, "3"], {"PYTHONPATH": os.path.join(SOURCE, "python")},
                  expect_reports=4)
    pids = {rep["pid"] for _, path, rep in r.items if path.startswith(tmp)}
    check(len(pids) >= 4, f"reports of the parent and each forked child: {len(pids)} pids")
    check(any(f.get("python") for _, _, rep in r.items for l in rep["leaks"] for f in l["stack"]),
          "a stack with Python frames")
    r.validate(minimum_reports=7)


def merged_and_reemitted_reports_match_the_schema():
    r = Reports()
    kv = os.path.join(BRIDGE, "progs", "kv_loop.py")
    inputs = []
    for rank in ("0", "1"):
        tmp = run_preload(r, f"leaky_inference rank {rank}", [sample("leaky_inference"), "4"], {"RANK": rank})
        inputs += sorted(glob.glob(os.path.join(tmp, "*.json")))
    for name, env in (("owners", {"LD_LIBRARY_PATH": PROGS + ":" + SIM}), ("async_pool", {})):
        cmd = [prog("owners_demo")] if name == "owners" else [sample("async_pool"), "10"]
        inputs += sorted(glob.glob(os.path.join(run_preload(r, name, cmd, env), "*.json")))
    inputs += sorted(glob.glob(os.path.join(run_cli(r, "torch", [kv, "leak", "6", "ctypes"], {"PYTHONPATH": FAKE}),
                                            "*.json")))
    # An exporter and an importer of one VMM allocation (shared entries).
    shared = sorted(glob.glob(os.path.join(run_preload(r, "vmm_share pair", [prog("vmm_share"), "pair"],
                                                       expect_reports=2), "*.json")))
    inputs += shared
    ipc = sorted(glob.glob(os.path.join(run_preload(r, "ipc", [prog("ipc"), "driver"], expect_reports=2), "*.json")))
    out = tempfile.mkdtemp(prefix="tl-schema-merge-")
    for name, files in (("ranks", inputs[:2]), ("shared", shared), ("all", inputs), ("ipc", ipc)):
        target = os.path.join(out, f"merged-{name}.json")
        p = subprocess.run([CLI, "merge", *files, "-o", target], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0, f"merge {name}: {p.stderr}")
    fixtures = [os.path.join(SOURCE, "tests", "cli", f) for f in ("rank0.json", "rank1.json")]
    p = subprocess.run([CLI, "merge", *fixtures, "-o", os.path.join(out, "merged-fixtures.json")],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"merge of the rank fixtures: {p.stderr}")
    for path in inputs:
        target = os.path.join(out, "reemitted-" + os.path.basename(path))
        p = subprocess.run([CLI, "report", path, "--format", "json", "-o", target], capture_output=True, text=True,
                           timeout=60)
        check(p.returncode == 0, f"report --format json {path}: {p.stderr}")
    before = len(r.items)
    r.add_dir("merge / report --format json", out)
    merged = [rep for _, _, rep in r.items[before:] if rep["reason"] == "merge"]
    check(len(merged) == 5 and all(rep["ranks"] for rep in merged), f"merged reports: {len(merged)}")
    with_ipc = [rep["ipc"] for rep in merged if rep.get("ipc", {}).get("mapped")]
    eq([[(m["exported_by"]["rank"], m["exported_by"]["pid"]) for m in ipc["mapped"]] for ipc in with_ipc],
       [[(x["rank"], x["pid"]) for x in ipc["exported"]] for ipc in with_ipc],
       "each merged IPC mapping paired with its export (the exporting input's rank and pid)")
    eq(len(with_ipc), 1, "one merged report with IPC mappings")
    r.validate(minimum_reports=len(inputs) * 2 + len(ipc) + 5)


def valid_fixtures_match_and_broken_ones_do_not():
    """The report fixtures are reports of earlier versions (they lack fields
    added since) and the CLI's expected JSON is what it writes from them:
    each is held to $defs/any_version, a merge's to the schema itself; the
    broken fixtures fail both, and the CLI refuses exactly those."""
    schema, any_version = validators()
    fixtures = sorted(glob.glob(os.path.join(SOURCE, "tests", "cli", "*.json")) +
                      glob.glob(os.path.join(SOURCE, "tests", "cli", "expected", "*.json")) +
                      glob.glob(os.path.join(SOURCE, "tests", "integration", "data", "*.json")))
    rel = {os.path.relpath(f, SOURCE): f for f in fixtures}
    check(set(BROKEN_FIXTURES) <= set(rel), f"broken fixtures missing: {sorted(set(BROKEN_FIXTURES) - set(rel))}")
    valid = bad = merged = 0
    for name, path in sorted(rel.items()):
        try:
            with open(path, encoding="utf-8") as f:
                rep = json.load(f)
            found, strict = problems(any_version, rep), problems(schema, rep)
        except (ValueError, UnicodeDecodeError) as e:
            rep, found, strict = None, [f"not JSON: {e}"], [f"not JSON: {e}"]
        this_version = strict if isinstance(rep, dict) and rep.get("reason") == "merge" else []
        if name in BROKEN_FIXTURES:
            check(found and strict, f"{name} ({BROKEN_FIXTURES[name]}) passes the schema")
            bad += 1
        else:
            for p in found + this_version:
                print(f"{name}: {p}")
            check(not found, f"{name} fails the schema's $defs/any_version")
            check(not this_version, f"{name}, written by tensorleak merge, fails the schema")
            valid += 1
            merged += rep.get("reason") == "merge"
        # The CLI agrees: it reads the valid fixtures and refuses the broken ones.
        p = subprocess.run([CLI, "report", path, "--format", "json"], capture_output=True, text=True, timeout=60)
        check((p.returncode == 0) == (name not in BROKEN_FIXTURES), f"tensorleak report {name}: exit {p.returncode}")
    eq(merged, 2, "merged reports among the expected outputs (owners.merged.json, ranks.merged.json)")
    print(f"{valid} fixtures valid ({merged} merged ones against the schema itself), {bad} broken ones refused")


def an_undeclared_field_or_a_wrong_type_fails_validation():
    r = Reports()
    run_preload(r, "caching_allocator", [sample("caching_allocator")], {"SIMCUDA_MEMORY": "48M"},
                expect_reports=2)  # its out-of-memory report and the exit report
    run_preload(r, "async_pool", [sample("async_pool"), "10"])
    kv = os.path.join(BRIDGE, "progs", "kv_loop.py")
    run_cli(r, "torch", [kv, "leak", "6", "ctypes"], {"PYTHONPATH": FAKE, "TENSORLEAK_TORCH_HISTORY": "1"})
    schema, _ = validators()
    exits = [rep for _, _, rep in r.items if rep["reason"] == "exit"]
    for rep in exits:
        check(not problems(schema, rep), "the unchanged report is valid")

    def first(rep, pred):
        return next(x for x in pred(rep))

    # Where an undeclared field goes: every kind of object in a report.
    places = {
        "the root": lambda rep: [rep],
        "summary": lambda rep: [rep["summary"]],
        "tracker": lambda rep: [rep["tracker"]],
        "gate": lambda rep: [rep["gate"]],
        "a leak": lambda rep: rep["leaks"],
        "a stack frame": lambda rep: [f for l in rep["leaks"] for f in l["stack"]],
        "a pool": lambda rep: rep["pools"],
        "a layout segment": lambda rep: [s for p in rep["pools"] for s in p.get("layout", [])],
        "a layout block": lambda rep: [b for p in rep["pools"] for s in p.get("layout", []) for b in s["blocks"]],
        "a pool's framework": lambda rep: [p["framework"] for p in rep["pools"] if "framework" in p],
        "a pool's Python site": lambda rep: [s for p in rep["pools"] for s in p.get("sites", [])],
        "a device": lambda rep: rep["devices"],
        "a growth row": lambda rep: rep["growth"],
        "a mark": lambda rep: rep["marks"],
        "the bridge": lambda rep: [rep["bridge"]] if rep["bridge"] else [],
        "an owner": lambda rep: rep["owners"],
    }
    tried = 0
    for where, pick in places.items():
        rep = next((rep for rep in exits if pick(rep)), None)
        check(rep is not None, f"no report has {where}")
        bad = copy.deepcopy(rep)
        first(bad, pick)["undeclared_field"] = 1
        found = problems(schema, bad)
        check(any("undeclared_field" in p for p in found), f"an undeclared field in {where} passes: {found}")
        tried += 1
    # A figure that is unknown is null, never a string or a negative number.
    wrong = [("summary", "largest_free_block", "unknown"), ("summary", "leaked_bytes", -1),
             ("summary", "fragmentation", 1.5), ("root", "reason", "sometimes"), ("pool", "kind", "mystery")]
    for where, key, value in wrong:
        bad = copy.deepcopy(exits[0])
        target = bad if where == "root" else bad["summary"] if where == "summary" else bad["pools"][0]
        target[key] = value
        check(problems(schema, bad), f"{where}.{key} = {value!r} passes")
        tried += 1
    print(f"{tried} altered reports refused")


if __name__ == "__main__":
    name = sys.argv[1]
    if not re.fullmatch(r"[a-z0-9_]+", name) or name not in globals():
        fail(f"no test named {name}")
    globals()[name]()
