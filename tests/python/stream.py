#!/usr/bin/env python3
"""Exec and attach with stdin through the official Kubernetes Python client.

Usage: stream.py http://HOST:PORT NAMESPACE EXEC_POD ATTACH_POD

EXEC_POD runs anything with `head` (busybox); ATTACH_POD's container has `stdin: true` and
echoes each line it reads as `got:<line>`. The client offers `v5.channel.k8s.io` and
`v4.channel.k8s.io` over a WebSocket and writes stdin the moment the connection is open, as a
text message for a str and a binary one for bytes: none of it may be lost.
"""

import sys
import time

import checks

from kubernetes import client
from kubernetes.stream import stream
from kubernetes.stream.ws_client import V4_CHANNEL_PROTOCOL, V5_CHANNEL_PROTOCOL

TIMEOUT = 20


def read_until(resp, want, timeout=TIMEOUT):
    """Read stdout until it contains `want` or the stream closes; return (stdout, stderr)."""
    out, err = "", ""
    deadline = time.time() + timeout
    while time.time() < deadline and want not in out:
        resp.update(timeout=1)
        out += resp.read_stdout(timeout=0) if resp.peek_stdout() else ""
        err += resp.read_stderr(timeout=0) if resp.peek_stderr() else ""
        if not resp.is_open():
            break
    return out, err


def exec_stdin(core, ns, pod, protocol, data):
    resp = stream(
        core.connect_get_namespaced_pod_exec, pod, ns,
        command=["head", "-n", "1"], stdin=True, stdout=True, stderr=True, tty=False,
        _preload_content=False,
        _request_timeout=TIMEOUT,
        **({"_headers": {"sec-websocket-protocol": protocol}} if protocol else {}),
    )
    try:
        # At once: before anything came back from the server.
        resp.write_stdin(data)
        out, err = read_until(resp, "hello")
        assert out == "hello\n", f"head -n 1 printed {out!r} (stderr {err!r}) over {resp.subprotocol}"
        deadline = time.time() + TIMEOUT
        while resp.is_open() and time.time() < deadline:
            resp.update(timeout=1)
        assert not resp.is_open(), "the session did not end when head exited"
        assert resp.returncode == 0, f"exit code {resp.returncode} over {resp.subprotocol}"
    finally:
        resp.close()


def exec_writes_stdin_at_once_as_text_over_v5(core, ns, pod, _attach):
    exec_stdin(core, ns, pod, None, "hello\nnot read\n")


def exec_writes_stdin_at_once_as_binary_over_v5(core, ns, pod, _attach):
    exec_stdin(core, ns, pod, None, b"hello\nnot read\n")


def exec_writes_stdin_at_once_over_v4(core, ns, pod, _attach):
    exec_stdin(core, ns, pod, V4_CHANNEL_PROTOCOL, "hello\nnot read\n")


def attach_writes_stdin_at_once(core, ns, _exec, pod):
    for protocol in [V5_CHANNEL_PROTOCOL, V4_CHANNEL_PROTOCOL]:
        resp = stream(
            core.connect_get_namespaced_pod_attach, pod, ns,
            container="app", stdin=True, stdout=True, stderr=True, tty=False,
            _preload_content=False,
            _request_timeout=TIMEOUT,
            _headers={"sec-websocket-protocol": protocol},
        )
        try:
            resp.write_stdin(f"ping-{protocol}\n")
            out, err = read_until(resp, f"got:ping-{protocol}\n")
            assert f"got:ping-{protocol}\n" in out, f"attach over {protocol} read {out!r} (stderr {err!r})"
        finally:
            resp.close()


CHECKS = [
    exec_writes_stdin_at_once_as_text_over_v5,
    exec_writes_stdin_at_once_as_binary_over_v5,
    exec_writes_stdin_at_once_over_v4,
    attach_writes_stdin_at_once,
]


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    url, ns, exec_pod, attach_pod = sys.argv[1:]
    core = client.CoreV1Api(client.ApiClient(client.Configuration(host=url)))
    return checks.run(CHECKS, core, ns, exec_pod, attach_pod)


if __name__ == "__main__":
    sys.exit(main())
