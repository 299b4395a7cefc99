"""(g) of tests/lambda/checks.py: the ingest function under `cargo lambda watch`, sent the S3 events
of events/ (ingest-*.json) with `cargo lambda invoke`, as S3 would send them: against moto's S3
(the events' bucket, `parley-documents-local`, versioned, made here) and moto's SQS (the
dead-letter queue), and the scratch database tests/lambda/run made. The objects are written
here before each event, as a person's upload would; the checks then look at what the function
answered, the rows it left (psql) and the queue.

Create, overwrite, the overwrite again (a duplicate), the create again (out of order), a corrupt
PDF (dead-lettered with its key and reason, the invocation still a success), the settings
object, the delete, and the create once more after it (a late event): each answer's outcome,
and the document's chunks after it.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Callable

from admin import REGION, invoke_raw, moto_json, moto_request, psql, start_moto, start_on_moto

FUNCTION = "ingest"
BUCKET = "parley-documents-local"
KEY = "handbook/Leave policy.md"  # "Leave+policy.md" in the events: keys come form-encoded
V1 = "# Leave policy\n\nStaff take twenty days of annual leave.\n"
V2 = "# Leave policy\n\nStaff take twenty-five days of annual leave and may carry five over.\n"
SETTINGS = '{"title": "Staff handbook", "public": true}'
CORRUPT = b"%PDF-1.7\nnot really a PDF\n"


def s3(endpoint: str, method: str, path: str, body: bytes = b"", query: str = "") -> bytes:
    """One S3 REST call, path-style."""
    url = f"{endpoint}/{urllib.request.quote(path)}" + (f"?{query}" if query else "")
    # A body needs its type: urllib's default (a form) makes moto read it as form fields.
    return moto_request(url, "s3", method, body if method == "PUT" else None,
                        {"Content-Type": "application/octet-stream"})


def sqs(endpoint: str, action: str, body: dict) -> dict:
    """One SQS call in the JSON protocol the Rust SDK speaks."""
    return moto_json(endpoint, "sqs", f"AmazonSQS.{action}", "1.0", body)


def run_ingest(checks, cargo_lambda: str, bin_dir: str, base: str, db_url: str, moto_server: str,
               psql_bin: str, keep: dict[str, str], work: Path, procs: list[subprocess.Popen],
               start_function: Callable, events_dir: Path, model_dir: Path) -> None:
    where = "ingest"
    if not moto_server or not psql_bin:
        checks.fail(f"{where}: setup: needs --moto-server and --psql from tests/lambda/run")
        return
    endpoint = start_moto(moto_server, work / "moto-ingest.log", procs)
    if not endpoint:
        checks.fail(f"{where}: setup: moto_server did not start ({work / 'moto-ingest.log'})")
        return
    try:
        s3(endpoint, "PUT", BUCKET, f"<CreateBucketConfiguration><LocationConstraint>{REGION}"
           "</LocationConstraint></CreateBucketConfiguration>".encode())
        s3(endpoint, "PUT", BUCKET, b"<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>",
           query="versioning")
        queue = sqs(endpoint, "CreateQueue", {"QueueName": "parley-ingest-dead-letters"})["QueueUrl"]
    except OSError as e:
        checks.fail(f"{where}: setup: the bucket and queue in moto: {e}")
        return
    settings = dict(
        keep,
        DATABASE_URL=db_url,
        EMBEDDINGS_MODEL_DIR=str(model_dir),
        INGEST_DLQ_URL=queue,
        DOCUMENTS_BUCKET=BUCKET,
        DB_POOL_MAX_SIZE="1",
    )
    port = start_on_moto(start_function, checks, procs, bin_dir, base, FUNCTION, settings, endpoint, work)

    def chunks() -> str:
        return psql(psql_bin, db_url, "SELECT count(*) || ' chunks: ' || coalesce(string_agg(k.text, ' | '), '') "
                    "FROM parley.chunks k JOIN parley.documents d ON d.id = k.document_id "
                    "JOIN parley.collections c ON c.id = d.collection_id "
                    "WHERE c.name = 'handbook' AND d.uri = 'Leave policy.md'")

    def step(name: str, event: str, before: Callable[[], None], want: str, after: Callable[[], list[str]]) -> None:
        marks = [p.stat().st_size if p.exists() else 0 for p in checks.logs]
        label = f"ingest: events/{event} {name}"
        try:
            before()
            code, printed = invoke_raw(cargo_lambda, port, events_dir / event, FUNCTION)
            if code != 0:
                checks.verdict(label, [f"invoke exited {code}: {printed.strip()[:300]}"], "", marks)
                return
            answer = json.loads(printed[printed.index("{"):])
            outcome = answer["records"][0]["outcome"]
            problems = [] if outcome.startswith(want) else [f"outcome {outcome!r}, not {want!r}"]
            problems += after()
        except Exception as e:  # noqa: BLE001 - a step we cannot finish is a failed check
            checks.verdict(label, [f"{type(e).__name__}: {e}"], "", marks)
            return
        checks.verdict(label, problems, f"{outcome}; {chunks()[:120]}", marks)

    def has(text: str, count: str = "1") -> Callable[[], list[str]]:
        def check() -> list[str]:
            now = chunks()
            return [] if now.startswith(f"{count} chunks") and text in now else [f"stored: {now[:300]}"]
        return check

    put = lambda key, body: lambda: s3(endpoint, "PUT", f"{BUCKET}/{key}", body)  # noqa: E731
    nothing = lambda: None  # noqa: E731
    step("(a new object) -> added", "ingest-create.json", put(KEY, V1.encode()), "added", has("twenty days"))
    step("(an overwrite) -> replaced", "ingest-overwrite.json", put(KEY, V2.encode()), "replaced", has("twenty-five"))
    step("again (a duplicate) -> stale, nothing twice", "ingest-overwrite.json", nothing, "stale", has("twenty-five"))
    step("again (out of order, older) -> stale, newest kept", "ingest-create.json", nothing, "stale",
         has("twenty-five"))

    def dead_lettered() -> list[str]:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = sqs(endpoint, "ReceiveMessage", {"QueueUrl": queue, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1})
            for m in got.get("Messages", []):
                body = json.loads(m["Body"])
                if body.get("key") == "handbook/scanned-form.pdf" and body.get("bucket") == BUCKET and body.get("reason"):
                    print(f"  (expected: this check sends a corrupt PDF on purpose) its dead letter: {m['Body'][:300]}", flush=True)
                    return []
        return ["no dead letter with the key and a reason in the queue"]

    step("(a corrupt PDF) -> refused, dead-lettered with key and reason", "ingest-corrupt.json",
         put("handbook/scanned-form.pdf", CORRUPT), "refused", dead_lettered)

    def titled() -> list[str]:
        got = psql(psql_bin, db_url, "SELECT title || ' public=' || public FROM parley.collections WHERE name = 'handbook'")
        return [] if got == "Staff handbook public=true" else [f"collection: {got!r}"]

    step("(the settings object) -> applied", "ingest-settings.json", put("handbook/_collection.json", SETTINGS.encode()),
         "settings applied", titled)
    step("(a delete) -> deleted", "ingest-delete.json", lambda: s3(endpoint, "DELETE", f"{BUCKET}/{KEY}"), "deleted",
         has("", "0"))
    step("after the delete (a late overwrite event) -> stale, stays deleted", "ingest-overwrite.json", nothing,
         "stale", has("", "0"))
