"""live_cost.py CLI LIVE_SERVER -- what the live state costs: the CPU a
tracked idle server spends per second publishing (TENSORLEAK_LIVE_INTERVAL=1
against TENSORLEAK_LIVE=0), the same for an idle Python server on the
stand-in torch (tests/bridge/fake), whose bridge reads the framework's
figures for every update, and one scrape / one top refresh over 100
processes of 20 pools each (synthetic entries made from a real one)."""
import json
import os
import subprocess
import sys
import tempfile
import time

CLI, SERVER = sys.argv[1], sys.argv[2]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(tmp, live, seconds=20):
    env = dict(os.environ, TENSORLEAK_LIVE_DIR=os.path.join(tmp, "live"), TENSORLEAK_QUIET="1",
               TENSORLEAK_LIVE="1" if live else "0", TENSORLEAK_OUTPUT=os.path.join(tmp, "r.%p.json"))
    ready = os.path.join(tmp, f"ready{live}")
    p = subprocess.Popen([CLI, "run", "--sim", "--", SERVER, "leaky", "50", os.path.join(tmp, f"s{live}.json"), ready],
                         stdin=subprocess.PIPE, env=env)
    return cpu_per_second(p, ready, seconds)


def cpu_per_second(p, ready, seconds, settle=0.0):
    """CPU seconds per second of `p` over `seconds`, once `ready` exists and
    `settle` more seconds passed; then ends it (stdin closed)."""
    while not os.path.exists(ready):
        time.sleep(0.05)
    time.sleep(settle)
    c0 = cpu_seconds(p.pid)
    time.sleep(seconds)
    c1 = cpu_seconds(p.pid)
    p.stdin.close()
    p.wait()
    return (c1 - c0) / seconds


def idle_cpu_python(tmp, live, seconds=20):
    """tests/live/torch_server.py: 6 requests, then idle in select() with
    the bridge thread waiting; with the live state on, every update asks
    the bridge for the framework's figures."""
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TENSORLEAK_LIVE_DIR=os.path.join(tmp, "live"), TENSORLEAK_QUIET="1",
               TENSORLEAK_LIVE="1" if live else "0", TENSORLEAK_OUTPUT=os.path.join(tmp, "p.%p.json"),
               PYTHONPATH=os.path.join(source, "tests", "bridge", "fake"))
    ready = os.path.join(tmp, f"pready{live}")
    p = subprocess.Popen([CLI, "run", "--sim", "--", sys.executable, os.path.join(source, "tests", "live", "torch_server.py"),
                          "6", os.path.join(tmp, f"ps{live}.json"), ready], stdin=subprocess.PIPE, env=env)
    return cpu_per_second(p, ready, seconds, settle=1.0)  # past the bridge's start


def scale(tmp):
    live = os.path.join(tmp, "live")
    env = dict(os.environ, TENSORLEAK_LIVE_DIR=live, TENSORLEAK_QUIET="1", TENSORLEAK_OUTPUT=os.path.join(tmp, "x.%p.json"))
    ready = os.path.join(tmp, "ready")
    p = subprocess.Popen([CLI, "run", "--sim", "--", SERVER, "pool", "5", os.path.join(tmp, "s.json"), ready],
                         stdin=subprocess.PIPE, env=env)
    while not os.path.exists(ready):
        time.sleep(0.05)
    time.sleep(1.5)
    with open(os.path.join(live, f"{p.pid}.json")) as f:
        doc = json.load(f)
    p.stdin.close()
    p.wait()
    many = os.path.join(tmp, "many")
    os.mkdir(many, 0o700)
    pool = doc["pools"][0]
    for i in range(100):
        d = json.loads(json.dumps(doc))
        d["pid"] = 100000 + i
        d["live"]["pid_namespace"] = "pid:[elsewhere]"  # judged by age
        d["live"]["update_time"] = time.time() + 3600
        d["pools"] = [dict(pool, name=f"pool {k}") for k in range(20)]
        path = os.path.join(many, f"{d['pid']}.json")
        with open(path, "w") as f:
            json.dump(d, f)
        os.chmod(path, 0o600)
    out = {}
    for name, cmd in (("scrape_ms", [CLI, "exporter", "--textfile", tmp, "--once", "--dir", many]),
                      ("top_once_ms", [CLI, "top", "--once", "--dir", many])):
        best = None
        for _ in range(10):
            t = time.perf_counter()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            ms = (time.perf_counter() - t) * 1000
            best = ms if best is None else min(best, ms)
        out[name] = round(best, 1)
    # A scrape as Prometheus makes it: GET /metrics from a running exporter
    # (no process start), best of 20.
    import socket
    import urllib.request
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    exporter = subprocess.Popen([CLI, "exporter", "--listen", f"127.0.0.1:{port}", "--dir", many],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        best = None
        for _ in range(20):
            t = time.perf_counter()
            body = urllib.request.urlopen(url, timeout=5).read()
            ms = (time.perf_counter() - t) * 1000
            best = ms if best is None else min(best, ms)
        out["scrape_http_ms"] = round(best, 1)
        out["scrape_http_bytes"] = len(body)
    finally:
        exporter.terminate()
        exporter.wait()
    return out


with tempfile.TemporaryDirectory() as tmp:
    res = scale(tmp)
    on, off = idle_cpu(tmp, True), idle_cpu(tmp, False)
    res["idle_cpu_ms_per_s_live_on"] = round(on * 1000, 2)
    res["idle_cpu_ms_per_s_live_off"] = round(off * 1000, 2)
    on, off = idle_cpu_python(tmp, True), idle_cpu_python(tmp, False)
    res["idle_python_bridge_cpu_ms_per_s_live_on"] = round(on * 1000, 2)
    res["idle_python_bridge_cpu_ms_per_s_live_off"] = round(off * 1000, 2)
    print(json.dumps(res))
