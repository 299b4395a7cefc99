"""(f) of tests/lambda/checks.py: `parley-admin` under `cargo lambda watch`, sent the custom-resource
events of events/ (admin-*.json) with `cargo lambda invoke`, as CloudFormation would send them:
their ResponseURL rewritten to a receiver started here (CloudFormation's side: it records each PUT),
their secrets in a moto Secrets Manager started here (the master secret an RDS-managed one:
username and password only; the login secrets under the names the events give), and the database
an empty one tests/lambda/run made. Create must migrate, load the demo and make logins that log
in; Update must change nothing; Delete must drop nothing; the bad events must be answered FAILED
with the reason; a direct `audit` must answer ok.

The shared server trusts loopback, so "logs in" here means the role exists with LOGIN and its
settings; tools/parley/tests/admin.rs checks the passwords on a server that asks for them.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

FUNCTION = "parley-admin"
REGION = "eu-west-2"
MOTO_KEY = "test"
# The login secrets the events name (ResourceProperties), and what each login is for.
LOGINS = {"mcp": "parley/local/mcp", "chat": "parley/local/chat", "sql": "parley/local/sql"}
MASTER_SECRET = "rds!cluster-parley-local"


class Receiver:
    """CloudFormation's end of the ResponseURL: records each PUT's headers and JSON body."""

    def __init__(self, port: int = 0) -> None:
        self.puts: list[tuple[dict[str, str], dict]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = {"unreadable": body[:200].decode("utf-8", "replace")}
                receiver.puts.append(({k.lower(): v for k, v in self.headers.items()}, doc))
                if receiver.echo:
                    print(json.dumps(doc, indent=2), flush=True)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:  # quiet
                pass

        self.echo = False
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/cloudformation-response?X-Amz-Signature=local"

    def close(self) -> None:
        self.server.shutdown()


def start_moto(server: str, log: Path, procs: list[subprocess.Popen]) -> str:
    """moto_server on a free loopback port; its endpoint, or "" if it did not start in 60 s."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs.append(subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdin=subprocess.DEVNULL,
                                  stdout=open(log, "wb"), stderr=subprocess.STDOUT))  # noqa: SIM115
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and procs[-1].poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    return ""


def moto_request(url: str, service: str, method: str = "POST", body: bytes | None = None,
                 headers: dict[str, str] | None = None) -> bytes:
    """One call to moto as `service`; moto checks no signature, only the region in it."""
    request = urllib.request.Request(url, data=body, method=method, headers={
        **(headers or {}),
        "Authorization": f"AWS4-HMAC-SHA256 Credential={MOTO_KEY}/20260101/{REGION}/{service}/aws4_request, "
                         "SignedHeaders=host, Signature=0",
    })
    with urllib.request.urlopen(request, timeout=30) as r:
        return r.read()


def moto_json(endpoint: str, service: str, target: str, version: str, body: dict) -> dict:
    """One call in the JSON protocol (`version` 1.0 or 1.1 as the service speaks it)."""
    headers = {"Content-Type": f"application/x-amz-json-{version}", "X-Amz-Target": target}
    return json.loads(moto_request(endpoint, service, body=json.dumps(body).encode(), headers=headers) or b"{}")


def moto_call(endpoint: str, target: str, body: dict) -> dict:
    """One Secrets Manager call."""
    return moto_json(endpoint, "secretsmanager", f"secretsmanager.{target}", "1.1", body)


def create_secrets(endpoint: str, db_url: str, users: dict[str, str]) -> None:
    """The master secret (an RDS-managed one: credentials only) and the login secrets the events
    name, for the database at `db_url`, each login called users[kind]."""
    db = urllib.parse.urlsplit(db_url)
    moto_call(endpoint, "CreateSecret", {"Name": MASTER_SECRET, "SecretString": json.dumps(
        {"username": db.username or "postgres", "password": db.password or "unused-under-trust"})})
    for kind, name in LOGINS.items():
        moto_call(endpoint, "CreateSecret", {"Name": name, "SecretString": json.dumps(
            {"username": users[kind], "password": f"{kind}-local-password", "engine": "postgres",
             "host": db.hostname, "port": db.port or 5432, "dbname": db.path.lstrip("/")})})


def invoke_raw(cargo_lambda: str, port: int, data_file: Path, function: str = FUNCTION) -> tuple[int, str]:
    """`cargo lambda invoke <function> --data-file` (parley-admin unless said): its exit code and
    what it printed."""
    r = subprocess.run(
        [cargo_lambda, "lambda", "invoke", function, "--invoke-address", "127.0.0.1", "--invoke-port",
         str(port), "--data-file", str(data_file), "--output-format", "json"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    return r.returncode, (r.stdout if r.returncode == 0 else r.stderr or r.stdout)


def start_on_moto(start_function: Callable, checks, procs: list[subprocess.Popen], bin_dir: str, base: str,
                  function: str, settings: dict[str, str], endpoint: str, work: Path) -> int:
    """Starts `function` of the build under the watch server at `base`, its AWS SDK pointed at
    moto at `endpoint`; the watch server's port."""
    settings = dict(settings, AWS_ENDPOINT_URL=endpoint, AWS_REGION=REGION, AWS_ACCESS_KEY_ID=MOTO_KEY,
                    AWS_SECRET_ACCESS_KEY=MOTO_KEY, RUST_LOG="info")
    start_function(checks, procs, bin_dir, function, function, f"{base}/.rt/{function}", settings,
                   work / f"{function}.log")
    return int(base.rsplit(":", 1)[1])


def psql(psql_bin: str, url: str, sql: str) -> str:
    r = subprocess.run([psql_bin, url, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       capture_output=True, text=True, timeout=60, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"psql: {r.stderr.strip()[:300]}")
    return r.stdout.strip()


def url_as(url: str, user: str) -> str:
    p = urllib.parse.urlsplit(url)
    host = p.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit(p._replace(netloc=f"{urllib.parse.quote(user, safe='')}@{host}"))


def run_admin(checks, cargo_lambda: str, bin_dir: str, base: str, db_url: str, moto_server: str,
              psql_bin: str, keep: dict[str, str], work: Path, procs: list[subprocess.Popen],
              start_function: Callable, events_dir: Path) -> None:
    where = "parley-admin"
    if not db_url or not moto_server or not psql_bin:
        checks.fail(f"{where}: setup: needs --admin-db-url, --moto-server and --psql from tests/lambda/run")
        return
    endpoint = start_moto(moto_server, work / "moto.log", procs)
    if not endpoint:
        checks.fail(f"{where}: setup: moto_server did not start ({work / 'moto.log'})")
        return
    suffix = f"{int(time.time()) % 100000}_{threading.get_ident() % 1000}"
    users = {kind: f"parley_{kind}_lambda_{suffix}" for kind in LOGINS}
    db = urllib.parse.urlsplit(db_url)
    try:
        create_secrets(endpoint, db_url, users)
    except OSError as e:
        checks.fail(f"{where}: setup: creating the secrets in moto: {e}")
        return
    receiver = Receiver()
    try:
        settings = dict(
            keep,
            SECRET_IDS=MASTER_SECRET,
            DATABASE_HOST=db.hostname or "127.0.0.1",
            DATABASE_PORT=str(db.port or 5432),
            DATABASE_NAME=db.path.lstrip("/"),
            DB_SSLMODE="disable",
        )
        port = start_on_moto(start_function, checks, procs, bin_dir, base, FUNCTION, settings, endpoint, work)
        admin_checks(checks, cargo_lambda, port, receiver, db_url, psql_bin, users, work, events_dir)
    finally:
        receiver.close()
        # Roles are cluster-wide: the ones made here go with the run (the database goes in run's trap).
        for user in users.values():
            try:
                psql(psql_bin, db_url, f'DROP ROLE IF EXISTS "{user}"')
            except RuntimeError as e:
                print(f"  (could not drop role {user}: {e})", flush=True)


def admin_checks(checks, cargo_lambda: str, port: int, receiver: Receiver, db_url: str, psql_bin: str,
                 users: dict[str, str], work: Path, events_dir: Path) -> None:
    physical = ""

    def send(name: str, overrides: dict | None = None) -> tuple[dict | None, str]:
        """The event with CloudFormation's URL replaced by the receiver's; the PUT it caused."""
        event = json.loads((events_dir / name).read_text())
        event["ResponseURL"] = receiver.url
        if physical and "PhysicalResourceId" in event:
            event["PhysicalResourceId"] = physical  # what CloudFormation sends back after Create
        event.update(overrides or {})
        path = work / f"sent-{name}"
        path.write_text(json.dumps(event))
        before = len(receiver.puts)
        code, printed = invoke_raw(cargo_lambda, port, path)
        if len(receiver.puts) != before + 1:
            return None, f"{len(receiver.puts) - before} PUTs (invoke exited {code}: {printed.strip()[:300]})"
        headers, doc = receiver.puts[-1]
        if headers.get("content-type"):
            return None, f"the PUT had Content-Type {headers['content-type']!r}; the presigned URL is signed for none"
        return doc, ""

    def counts() -> str:
        return psql(psql_bin, db_url, "SELECT (SELECT count(*) FROM schema_migrations) || ' migrations, ' || "
                    "(SELECT count(*) FROM public.feedback) || ' feedback, ' || (SELECT count(*) FROM public.tasks) || ' tasks'")

    def step(name: str, event: str, check: Callable[[dict], list[str]], detail: Callable[[dict], str]) -> dict | None:
        marks = [p.stat().st_size if p.exists() else 0 for p in checks.logs]
        try:
            doc, problem = send(event)
            problems = [problem] if problem else check(doc)
        except Exception as e:  # noqa: BLE001 - a step we cannot finish is a failed check
            doc, problems = None, [f"{type(e).__name__}: {e}"]
        if problems:
            checks.verdict(name, problems, "", marks)
            return None
        checks.ok(f"{name} ({detail(doc)})")
        return doc

    def created(doc: dict) -> list[str]:
        problems = []
        if doc.get("Status") != "SUCCESS":
            return [f"Status {doc.get('Status')}: {doc.get('Reason')}"]
        if not str(doc.get("PhysicalResourceId", "")).startswith("parley-db:"):
            problems.append(f"PhysicalResourceId {doc.get('PhysicalResourceId')!r}")
        if doc.get("Data", {}).get("DemoDomains") != "feedback,tasks":
            problems.append(f"Data {doc.get('Data')}")
        for kind, user in users.items():
            who = psql(psql_bin, url_as(db_url, user), "SELECT current_user || ' ' || current_setting('default_transaction_read_only')")
            want = f"{user} {'off' if kind == 'chat' else 'on'}"
            if who != want:
                problems.append(f"logged in as {user}: {who!r}, not {want!r}")
        may_switch = psql(psql_bin, db_url, f"SELECT pg_has_role('{users['mcp']}', 'parley_tasks_writer', 'SET')")
        if may_switch != "t":
            problems.append(f"{users['mcp']} may not SET ROLE parley_tasks_writer")
        return problems

    done = step("parley-admin: events/admin-create.json -> SUCCESS, migrated, demo loaded, logins log in",
                "admin-create.json", created,
                lambda d: f"{d['PhysicalResourceId']}, {d['Data']['MigrationsApplied']} migrations applied; {counts()}; "
                          f"logins {d['Data']['Logins']}")
    if done is None:
        return
    physical = done["PhysicalResourceId"]
    before = counts()
    step("parley-admin: events/admin-update.json -> SUCCESS, nothing changed", "admin-update.json",
         lambda d: [] if d.get("Status") == "SUCCESS" and d.get("PhysicalResourceId") == physical
         and d["Data"]["MigrationsApplied"] == "0" and counts() == before
         else [f"{d.get('Status')} {d.get('PhysicalResourceId')} {d.get('Data')} {d.get('Reason')}; {counts()} vs {before}"],
         lambda d: f"same id, 0 migrations applied, {counts()}")
    step("parley-admin: events/admin-delete.json -> SUCCESS, nothing dropped", "admin-delete.json",
         lambda d: [] if d.get("Status") == "SUCCESS" and d.get("PhysicalResourceId") == physical
         and counts() == before and psql(psql_bin, db_url, f"SELECT count(*) FROM pg_roles WHERE rolname IN "
                                         f"({', '.join(repr(u) for u in users.values())})") == "3"
         else [f"{d.get('Status')} {d.get('PhysicalResourceId')}; {counts()} vs {before}"],
         lambda d: f"{d['PhysicalResourceId']} echoed; {counts()}; the 3 logins still there")
    step("parley-admin: events/admin-bad-secret.json -> FAILED naming the secret", "admin-bad-secret.json",
         lambda d: [] if d.get("Status") == "FAILED"
         and "cannot fetch secret parley/local/no-such-secret" in d.get("Reason", "") else [str(d)],
         lambda d: f"Reason {d['Reason'][:120]!r}")
    step("parley-admin: events/admin-bad-demo-data.json -> FAILED with what is expected", "admin-bad-demo-data.json",
         lambda d: [] if d.get("Status") == "FAILED"
         and d.get("Reason") == "ResourceProperties.DemoData is `everything`: expected none, demo or all" else [str(d)],
         lambda d: f"Reason {d['Reason']!r}")

    def direct(name: str, payload_file: Path, expect: Callable[[dict], bool]) -> None:
        try:
            code, printed = invoke_raw(cargo_lambda, port, payload_file)
            answer = json.loads(printed[printed.index("{"):]) if code == 0 else {"invoke": printed[:300]}
        except (ValueError, subprocess.TimeoutExpired) as e:
            checks.fail(f"{name}: {e}")
            return
        if expect(answer):
            checks.ok(f"{name} ({json.dumps(answer)[:160]})")
        else:
            checks.fail(f"{name}: {json.dumps(answer)[:400]}")

    direct("parley-admin: events/admin-invoke-audit.json -> ok", events_dir / "admin-invoke-audit.json",
           lambda a: a.get("ok") is True and a.get("error") == "" and isinstance(a.get("output"), str))
    ingest = work / "invoke-ingest.json"
    ingest.write_text(json.dumps({"command": ["ingest", "--collection", "c", "/etc"]}))
    direct("parley-admin: {\"command\": [\"ingest\", ...]} -> ok false, not on the allow-list", ingest,
           lambda a: a.get("ok") is False and a.get("error", "").startswith("`ingest` cannot run in the function"))


def main() -> None:
    """For a local run by hand (docs/local-lambda.md): `admin.py secrets ENDPOINT DB_URL` creates
    the events' secrets in moto at ENDPOINT; `admin.py receive PORT` prints each answer PUT to
    http://127.0.0.1:PORT until interrupted."""
    import sys

    if sys.argv[1:2] == ["secrets"] and len(sys.argv) == 4:
        create_secrets(sys.argv[2], sys.argv[3], {kind: f"parley_{kind}" for kind in LOGINS})
        print(f"created {MASTER_SECRET} and {', '.join(LOGINS.values())} (users parley_mcp, parley_chat, parley_sql)")
    elif sys.argv[1:2] == ["receive"] and len(sys.argv) == 3:
        receiver = Receiver(int(sys.argv[2]))
        receiver.echo = True
        print(f"receiving answers at {receiver.url}", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            receiver.close()
    else:
        sys.exit(main.__doc__)


if __name__ == "__main__":
    main()
