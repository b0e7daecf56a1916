#!/usr/bin/env python3
"""10,000 bench-shaped pods into a fresh kaji-apiserver, 5 LISTs, then samples VmRSS at rest.
Usage: scripts/apiserver-rss.py <kaji-apiserver binary> <out-prefix> [seconds at rest]"""
import http.client, json, os, subprocess, sys, tempfile, threading, time, socket

binary, out = sys.argv[1], sys.argv[2]
rest = int(sys.argv[3]) if len(sys.argv) > 3 else 200
data = tempfile.mkdtemp(prefix="kaji-rss-")
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
log = open(out + ".log", "w")
p = subprocess.Popen([binary, "--insecure-bind-address", "127.0.0.1", "--insecure-port", str(port), "--data-dir", data],
                     stdout=log, stderr=subprocess.STDOUT)
def rss():
    d = {}
    for l in open(f"/proc/{p.pid}/status"):
        k, _, v = l.partition(":")
        if k in ("VmRSS", "VmHWM"): d[k] = int(v.split()[0]) / 1024
    return d
for _ in range(100):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5); c.request("GET", "/healthz"); c.getresponse().read(); break
    except Exception: time.sleep(0.1)
t0 = time.time()
samples = [("empty", 0.0, rss())]
def pod(i):
    name = f"bench-{i:05d}"
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "storefront", "tier": "frontend", "version": "v1.4.2", "shard": f"s{i%100:02d}", "bench.kaji.dev/index": str(i)}, "annotations": {"bench.kaji.dev/owner": "team-storefront", "prometheus.io/scrape": "true", "prometheus.io/port": "9090"}},
        "spec": {"containers": [{"name": "web", "image": "registry.example.com/storefront/web:1.4.2", "command": ["/app/server"], "args": ["--listen=:8080", "--metrics=:9090", "--log-level=info"],
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}, {"name": "metrics", "containerPort": 9090, "protocol": "TCP"}],
            "env": [{"name": "POD_INDEX", "value": str(i)}, {"name": "LOG_FORMAT", "value": "json"}, {"name": "UPSTREAM_URL", "value": "http://catalog.default.svc.cluster.local:8080"}, {"name": "CACHE_TTL_SECONDS", "value": "300"}],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 5}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30}}).encode()
errors = [0]
def worker(k):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(k, 10000, 8):
        c.request("POST", "/api/v1/namespaces/default/pods", body=pod(i), headers={"Content-Type": "application/json"})
        r = c.getresponse(); r.read()
        if r.status != 201: errors[0] += 1
ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
samples.append((f"after 10,000 creates ({errors[0]} errors)", time.time() - t0, rss()))
for _ in range(5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120); c.request("GET", "/api/v1/pods"); c.getresponse().read()
samples.append(("after 5 LISTs", time.time() - t0, rss()))
end = time.time() + rest
while time.time() < end:
    time.sleep(10)
    samples.append(("at rest", time.time() - t0, rss()))
p.terminate(); p.wait(30)
log.close()
rewrites = [l for l in open(out + ".log") if "rewrote the store file" in l]
with open(out + ".md", "w") as f:
    for what, t, r in samples:
        f.write(f"| {what} | {t:.0f} s | {r['VmRSS']:.1f} | {r['VmHWM']:.1f} |\n")
    f.write("\n" + "".join(rewrites))
subprocess.run(["rm", "-rf", data])
print(open(out + ".md").read())
