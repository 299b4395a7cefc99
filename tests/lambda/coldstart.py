#!/usr/bin/env python3
"""Cold start of one function binary, process start to first response served (stdlib only).

  coldstart.py --mode http   --bin PATH --env-file F [--runs N] REQUEST...
  coldstart.py --mode lambda --bin PATH --env-file F --runtime-api URL --invoke-base URL
               --function NAME [--runs N] REQUEST...

REQUEST is `--method M --path P [--header 'K: V']... [--data BODY] [--expect S]`.

http: each run starts the binary with LISTEN_ADDR=127.0.0.1:<free port> (plain-HTTP runtime) and
sends REQUEST in a tight loop (a refused connection is retried at once) until one is answered;
the time is from just before the process is spawned to that answer.

lambda: each run starts the binary with AWS_LAMBDA_RUNTIME_API=<runtime-api>/<function> (a
`cargo lambda watch --only-lambda-apis` server), so it runs the real Lambda runtime loop, and at
once sends REQUEST to <invoke-base>/lambda-url/<function><path>, which the emulator holds until
the function has initialised and polled for it: spawn to answer is Init + the first Invoke.

Each run stops the process (SIGTERM, then SIGKILL) before the next. Prints one JSON line:
{"runs": [ms, ...], "median_ms", "min_ms", "max_ms", "status"}; exits 1 if a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request


def read_env(path: str) -> dict[str, str]:
    env: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                env[k] = v
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send(url: str, args: argparse.Namespace, timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, method=args.method, data=args.data.encode() if args.data else None
    )
    for h in args.header:
        k, v = h.split(":", 1)
        req.add_header(k.strip(), v.strip())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def one_run(args: argparse.Namespace, base_env: dict[str, str], log) -> tuple[float, int, bytes]:
    env = dict(base_env)
    if args.mode == "http":
        port = free_port()
        env["LISTEN_ADDR"] = f"127.0.0.1:{port}"
        url = f"http://127.0.0.1:{port}{args.path}"
    else:
        env.update(
            AWS_LAMBDA_RUNTIME_API=f"{args.runtime_api}/{args.function}",
            AWS_LAMBDA_FUNCTION_NAME=args.function,
            AWS_LAMBDA_FUNCTION_VERSION="1",
            AWS_LAMBDA_FUNCTION_MEMORY_SIZE="1024",
        )
        url = f"{args.invoke_base}/lambda-url/{args.function}{args.path}"
    t0 = time.perf_counter()
    proc = subprocess.Popen([args.bin], env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        if args.mode == "lambda":
            status, body = send(url, args, timeout=60)
            return (time.perf_counter() - t0) * 1000, status, body
        deadline = t0 + 60
        while True:
            try:
                status, body = send(url, args, timeout=60)
                return (time.perf_counter() - t0) * 1000, status, body
            except (ConnectionRefusedError, ConnectionResetError, urllib.error.URLError) as e:
                reason = getattr(e, "reason", e)
                if not isinstance(reason, (ConnectionRefusedError, ConnectionResetError)):
                    raise
                if proc.poll() is not None:
                    raise RuntimeError(f"{args.bin} exited with {proc.returncode} before answering")
                if time.perf_counter() > deadline:
                    raise RuntimeError("no answer within 60 s")
    finally:
        stop(proc)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["http", "lambda"], required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--env-file", required=True)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--runtime-api")
    p.add_argument("--invoke-base")
    p.add_argument("--function")
    p.add_argument("--method", default="GET")
    p.add_argument("--path", default="/health")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--data")
    p.add_argument("--expect", type=int, default=200)
    p.add_argument("--log", default=os.devnull)
    args = p.parse_args()
    base_env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    base_env.update(read_env(args.env_file))
    runs: list[float] = []
    with open(args.log, "ab") as log:
        for i in range(args.runs):
            try:
                ms, status, body = one_run(args, base_env, log)
            except Exception as e:  # noqa: BLE001
                print(json.dumps({"error": f"run {i + 1}: {type(e).__name__}: {e}"}))
                return 1
            if status != args.expect:
                print(json.dumps({"error": f"run {i + 1}: status {status}: {body[:300]!r}"}))
                return 1
            runs.append(round(ms, 1))
    print(
        json.dumps(
            {
                "runs": runs,
                "median_ms": round(statistics.median(runs), 1),
                "min_ms": min(runs),
                "max_ms": max(runs),
                "status": args.expect,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
