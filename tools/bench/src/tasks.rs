//! The caller-bound scenarios of `parley-bench mcp`, over the tasks demo domain
//! (`domains/tasks`): a fixed set of bench users with seeded tasks, one HS256 token per user
//! for the mcp function, the calls (`list_tasks`, a read; `create_task`, a keyed write) and
//! the idempotency keys of the writes.
//!
//! The bench connects as a superuser, which bypasses row-level security, so seeding and
//! cleaning up are plain SQL. What the writes leave (tasks tagged [`WRITE_TAG`] and their
//! `parley.idempotency` rows) is deleted at the start of every run, so reruns measure the same
//! table.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use jsonwebtoken::{EncodingKey, Header, encode};
use parley_core::jwt::VerifiedClaims;
use reqwest::header::HeaderValue;
use serde_json::{Map, Value, json};

/// Bench users, `bench-user-1` ..= `bench-user-50`.
pub const USERS: usize = 50;
/// Seeded tasks per user (a quarter done, some undated, tags work/home/urgent/errands).
const TASKS_PER_USER: i64 = 40;
/// The tag every task `create_task` makes in the bench carries, so a rerun can delete them.
const WRITE_TAG: &str = "bench-write";
/// The prefix of every idempotency key the bench sends.
const KEY_PREFIX: &str = "bench-";
/// The bench users' tokens' issuer (`JWT_ISSUER` of the server).
pub const ISSUER: &str = "https://parley-bench.invalid";
/// How long each bench user's token is valid: longer than any run.
const TOKEN_SECS: u64 = 3600;

/// The `list_tasks` arguments calls rotate over: the default (unfinished, soonest due first),
/// a tag, every status by priority, a due-date window and a text search.
fn list_arguments() -> Vec<Value> {
    vec![
        json!({}),
        json!({ "tag": "work" }),
        json!({ "status": "any", "sort": "priority", "limit": 10 }),
        json!({ "due_after": "2026-11-15", "due_before": "2026-12-15" }),
        json!({ "text": "report" }),
    ]
}

/// One bench user: the claims its token carries (exactly what the mcp function verifies and
/// puts in `parley.caller`) and the `Authorization` header with that token.
pub struct User {
    pub claims: VerifiedClaims,
    /// The claims as the JSON text `tools::exec` sends to `set_config('parley.caller', ...)`.
    pub claims_json: String,
    pub authorization: HeaderValue,
}

/// Mints one HS256 token per bench user with `secret` for `audience`, valid for
/// [`TOKEN_SECS`].
pub fn users(secret: &str, audience: &str) -> anyhow::Result<Vec<User>> {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs()
        + TOKEN_SECS;
    let key = EncodingKey::from_secret(secret.as_bytes());
    (1..=USERS)
        .map(|n| {
            let subject = format!("bench-user-{n}");
            let payload = json!({ "iss": ISSUER, "aud": audience, "sub": subject, "exp": exp });
            let token = encode(&Header::default(), &payload, &key)?;
            let Value::Object(claims) = payload else {
                unreachable!("json! of an object literal")
            };
            Ok(User {
                claims_json: Value::Object(claims.clone()).to_string(),
                claims: VerifiedClaims { subject, claims },
                authorization: HeaderValue::from_str(&format!("Bearer {token}"))?,
            })
        })
        .collect()
}

/// A caller-bound scenario's calls: call `i` runs as user `callers[i]` with `calls[i]`.
pub struct Calls {
    pub calls: Vec<Map<String, Value>>,
    pub callers: Vec<usize>,
}

/// `list_tasks` for every user with every argument set (250 calls, users rotating fastest).
pub fn list_calls() -> Calls {
    let arguments = list_arguments();
    let (calls, callers) = arguments
        .iter()
        .flat_map(|a| (0..USERS).map(move |u| (object(a.clone()), u)))
        .unzip();
    Calls { calls, callers }
}

/// `create_task` once per user: a dated, tagged task (tagged [`WRITE_TAG`] for the cleanup).
pub fn create_calls() -> Calls {
    let priorities = ["low", "normal", "high"];
    let (calls, callers) = (0..USERS)
        .map(|u| {
            let args = json!({
                "title": format!("Bench write {}", u + 1),
                "notes": "made by parley-bench",
                "due_on": format!("2026-12-{:02}", 1 + u % 28),
                "priority": priorities[u % priorities.len()],
                "tags": [WRITE_TAG, "work"],
            });
            (object(args), u)
        })
        .unzip();
    Calls { calls, callers }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! of an object literal"),
    }
}

/// Unique idempotency keys for the writes of one run, across every path and phase (warm-up,
/// one at a time, concurrent), since call indices repeat between phases.
pub struct Keys {
    run: String,
    next: AtomicU64,
}

impl Keys {
    pub fn new(run: &str) -> Self {
        Self {
            run: format!("{KEY_PREFIX}{run}"),
            next: AtomicU64::new(0),
        }
    }

    pub fn next(&self) -> String {
        format!("{}-{}", self.run, self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// How many keys were handed out.
    pub fn issued(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }
}

/// Checks that every keyed write of this run wrote exactly one task and one idempotency
/// record: each call had its own key, so none may have been replayed or lost.
pub async fn check_writes(client: &tokio_postgres::Client, keys: &Keys) -> anyhow::Result<()> {
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM tasks
                      WHERE owner LIKE 'bench-user-%' AND $1 = ANY (tags)),
                    (SELECT count(*) FROM parley.idempotency
                      WHERE tool = 'create_task' AND key LIKE $2 || '-%')",
            &[&WRITE_TAG, &keys.run],
        )
        .await
        .context("counting this run's writes")?;
    let (tasks, records): (i64, i64) = (row.get(0), row.get(1));
    let issued = i64::try_from(keys.issued())?;
    if tasks != issued || records != issued {
        anyhow::bail!(
            "create_task: {issued} keyed calls wrote {tasks} tasks and {records} idempotency records"
        );
    }
    eprintln!("create_task: {issued} keyed calls, {tasks} tasks and {records} records written");
    Ok(())
}

/// Deletes what earlier runs' writes left, seeds the bench users' tasks unless exactly the
/// seeded set is there, and refreshes the table's statistics.
pub async fn prepare(client: &tokio_postgres::Client) -> anyhow::Result<()> {
    let users = i64::try_from(USERS)?;
    let cleared = client
        .query_one(
            "WITH written AS (DELETE FROM tasks
                               WHERE owner LIKE 'bench-user-%' AND $1 = ANY (tags) RETURNING 1),
                  recorded AS (DELETE FROM parley.idempotency
                                WHERE tool = 'create_task' AND key LIKE $2 || '%' RETURNING 1)
             SELECT (SELECT count(*) FROM written), (SELECT count(*) FROM recorded)",
            &[&WRITE_TAG, &KEY_PREFIX],
        )
        .await
        .context("deleting what earlier runs wrote")?;
    let (written, keys): (i64, i64) = (cleared.get(0), cleared.get(1));
    let seeded: i64 = client
        .query_one(
            "SELECT count(*) FROM tasks WHERE owner LIKE 'bench-user-%'",
            &[],
        )
        .await?
        .get(0);
    if seeded != users * TASKS_PER_USER {
        client
            .execute("DELETE FROM tasks WHERE owner LIKE 'bench-user-%'", &[])
            .await?;
        client
            .execute(SEED, &[&users, &TASKS_PER_USER])
            .await
            .context("seeding the bench users' tasks")?;
        eprintln!(
            "tasks: seeded {} tasks for {USERS} bench users",
            users * TASKS_PER_USER
        );
    }
    if written > 0 || keys > 0 {
        eprintln!("tasks: deleted {written} tasks and {keys} idempotency records of earlier runs");
    }
    // The deletes leave dead rows in the index list_tasks scans.
    // One statement per message: a multi-statement message is one transaction, which VACUUM
    // refuses.
    for table in ["tasks", "parley.idempotency"] {
        client
            .batch_execute(&format!("VACUUM ANALYZE {table}"))
            .await
            .with_context(|| format!("vacuuming {table}"))?;
    }
    Ok(())
}

/// `$1` users with `$2` tasks each, the same every time: titles from a short list (a few
/// mention a report), due dates spread over Nov 2026 - Jan 2027 (every 7th undated), a
/// quarter done, priorities and tags rotating.
const SEED: &str = "
INSERT INTO tasks (owner, title, notes, due_on, priority, status, tags, created_at, updated_at,
                   completed_at)
SELECT 'bench-user-' || u,
       (ARRAY['Write the quarterly report', 'Call the plumber', 'Renew my passport',
              'Book a dentist appointment', 'Review the pull request', 'Buy groceries',
              'Plan the team offsite', 'Pay the electricity bill'])[1 + (u + n) % 8] || ' #' || n,
       CASE WHEN n % 3 = 0 THEN 'Notes for task ' || n ELSE '' END,
       CASE WHEN n % 7 = 0 THEN NULL ELSE date '2026-11-01' + ((n * 11 + u) % 90)::int END,
       (ARRAY['low', 'normal', 'high'])[1 + (n + u) % 3],
       CASE n % 4 WHEN 0 THEN 'done' WHEN 1 THEN 'in_progress' ELSE 'open' END,
       CASE n % 5 WHEN 0 THEN '{work}'::text[] WHEN 1 THEN '{home}' WHEN 2 THEN '{urgent,work}'
                  WHEN 3 THEN '{errands}' ELSE '{}' END,
       timestamptz '2026-10-01 09:00+00' + n * interval '1 hour',
       timestamptz '2026-10-01 09:00+00' + n * interval '1 hour',
       CASE WHEN n % 4 = 0 THEN timestamptz '2026-10-20 09:00+00' END
FROM generate_series(1, $1::bigint) AS u, generate_series(1, $2::bigint) AS n";

#[cfg(test)]
mod tests {
    use parley_core::config::Env;
    use parley_core::jwt::{JwtConfig, Verifier};

    use super::*;

    const SECRET: &str = "bench-jwt-secret-at-least-32-bytes-long";
    const RESOURCE: &str = "http://127.0.0.1:9/mcp";

    #[tokio::test]
    async fn tokens_verify_as_the_server_verifies_them_and_carry_the_floors_claims() {
        let env = Env::from_pairs([
            ("JWT_SECRET", SECRET),
            ("JWT_ISSUER", ISSUER),
            ("JWT_AUDIENCE", RESOURCE),
        ]);
        let verifier = Verifier::new(JwtConfig::from_env(&env).unwrap(), reqwest::Client::new());
        let users = users(SECRET, RESOURCE).unwrap();
        assert_eq!(users.len(), USERS);
        for user in [&users[0], &users[USERS - 1]] {
            let header = user.authorization.to_str().unwrap();
            let verified = verifier
                .verify(header.strip_prefix("Bearer ").unwrap())
                .await
                .unwrap();
            assert_eq!(verified.subject, user.claims.subject);
            // What `tools::exec` sends to parley.caller is the verified claims' JSON text: the
            // `raw+tx+caller` floor must send the same.
            assert_eq!(Value::Object(verified.claims).to_string(), user.claims_json);
        }
    }

    #[test]
    fn keys_never_repeat_and_are_counted() {
        let keys = Keys::new("run");
        let (a, b) = (keys.next(), keys.next());
        assert_ne!(a, b);
        assert!(a.starts_with(KEY_PREFIX));
        assert_eq!(keys.issued(), 2);
    }

    #[test]
    fn every_call_has_a_user() {
        for calls in [list_calls(), create_calls()] {
            assert_eq!(calls.calls.len(), calls.callers.len());
            assert!(calls.callers.iter().all(|&u| u < USERS));
        }
    }
}
