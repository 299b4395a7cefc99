"""The Python peer in `parley-bench mcp`'s three-way comparison.

The official MCP Python SDK's server (FastMCP), stateless Streamable HTTP with JSON responses,
with one tool, `lad_by_ref`, running the SQL Parley runs for it through a psycopg pool. The
bench passes everything in the environment:

  PEER_PORT      port on 127.0.0.1
  PEER_DSN       libpq connection string of the bench database
  PEER_SQL       the statement, with psycopg placeholders %(p1)s, %(p2)s, ...
  PEER_POOL      pool size (the bench's --concurrency)
  PEER_MAX_ROWS  rows returned at most (the tool's max_rows; one more is fetched to tell)
"""

import asyncio
import json
import os

from mcp.server.fastmcp import FastMCP
from psycopg_pool import AsyncConnectionPool

PORT = int(os.environ["PEER_PORT"])
DSN = os.environ["PEER_DSN"]
SQL = os.environ["PEER_SQL"]
POOL_SIZE = int(os.environ.get("PEER_POOL", "4"))
MAX_ROWS = int(os.environ.get("PEER_MAX_ROWS", "5"))

server = FastMCP(
    "python-peer",
    stateless_http=True,
    json_response=True,
    host="127.0.0.1",
    port=PORT,
    log_level="WARNING",
)

# In stateless mode the SDK runs the server's lifespan per request, so the pool is opened
# once, on first use, instead.
_pool: AsyncConnectionPool | None = None
_pool_lock = asyncio.Lock()


async def pool() -> AsyncConnectionPool:
    global _pool
    async with _pool_lock:
        if _pool is None:
            p = AsyncConnectionPool(DSN, min_size=POOL_SIZE, max_size=POOL_SIZE, open=False)
            await p.open(wait=True)
            _pool = p
    return _pool


@server.tool()
async def lad_by_ref(ref: str) -> dict:
    """Look up one local authority district by its ONS code or name."""
    async with (await pool()).connection() as conn:
        cur = await conn.execute(SQL, {"p1": ref, "p2": MAX_ROWS + 1})
        texts = [row[0] for row in await cur.fetchall()]
    rows = [json.loads(t) for t in texts[:MAX_ROWS]]
    return {"rows": rows, "row_count": len(rows), "truncated": len(texts) > MAX_ROWS}


if __name__ == "__main__":
    server.run(transport="streamable-http")
