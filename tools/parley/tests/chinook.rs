//! `parley demo-data --domain chinook` (issue 35, item 9) as a user runs it: the Chinook music
//! store with its keys and every row, beside the lahman and nycflights13 distractor schemas;
//! a second run gives the same database.

use std::process::Command;

use parley_testkit::TestDb;

/// Chinook's tables and their rows: all of upstream's data.
const CHINOOK_ROWS: [(&str, i64); 11] = [
    ("album", 347),
    ("artist", 275),
    ("customer", 59),
    ("employee", 8),
    ("genre", 25),
    ("invoice", 412),
    ("invoice_line", 2240),
    ("media_type", 5),
    ("playlist", 18),
    ("playlist_track", 8715),
    ("track", 3503),
];

/// `parley demo-data --domain chinook`'s standard output, after checking it exited 0.
fn demo_data_chinook(url: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_parley"))
        .args(["demo-data", "--domain", "chinook"])
        .env_clear()
        .env("DATABASE_URL", url)
        .output()
        .expect("parley runs");
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn demo_data_loads_chinook_with_its_keys_beside_30_distractor_tables_and_a_rerun_gives_the_same()
 {
    let db = TestDb::migrated().await;
    let first = demo_data_chinook(&db.url);
    assert!(first.contains("chinook: 11 tables, 15607 rows"), "{first}");
    assert!(first.contains("lahman: 27 tables"), "{first}");
    assert!(first.contains("nycflights13: 5 tables"), "{first}");
    assert!(
        !first.contains("feedback") && !first.contains("tasks"),
        "{first}"
    );
    let again = demo_data_chinook(&db.url);
    assert!(again.contains("chinook: 11 tables, 15607 rows"), "{again}");

    let client = db.client().await;
    let count = |sql: &'static str| {
        let client = &client;
        async move {
            let n: i64 = client.query_one(sql, &[]).await.unwrap().get(0);
            n
        }
    };
    for (table, rows) in CHINOOK_ROWS {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM chinook.{table}"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, rows, "chinook.{table}");
    }
    assert_eq!(
        count("SELECT count(*) FROM pg_tables WHERE schemaname = 'chinook'").await,
        11
    );
    let distractors =
        count("SELECT count(*) FROM pg_tables WHERE schemaname IN ('lahman', 'nycflights13')")
            .await;
    assert!(distractors >= 30, "{distractors} distractor tables");
    assert_eq!(
        count(
            "SELECT count(*) FROM pg_tables
              WHERE schemaname IN ('lahman', 'nycflights13')
                AND NOT EXISTS (SELECT FROM pg_class c
                                 WHERE c.oid = format('%I.%I', schemaname, tablename)::regclass
                                   AND c.reltuples > 0)"
        )
        .await,
        0,
        "every distractor table has rows (and was analyzed)"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM pg_constraint
              WHERE contype = 'f' AND connamespace = 'chinook'::regnamespace"
        )
        .await,
        11,
        "Chinook's foreign keys, as upstream's"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM pg_constraint
              WHERE contype = 'p' AND connamespace = 'chinook'::regnamespace"
        )
        .await,
        11
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM pg_description d JOIN pg_class c ON c.oid = d.objoid
              WHERE d.classoid = 'pg_class'::regclass
                AND c.relnamespace IN ('chinook'::regnamespace, 'lahman'::regnamespace,
                                       'nycflights13'::regnamespace)"
        )
        .await,
        0,
        "no comments: the catalog is drafted from bare schemas"
    );

    // Ad-hoc SQL's role reads all three schemas.
    let reader_url = db.sql_reader_url("").await;
    let (reader, connection) = tokio_postgres::connect(&reader_url, tokio_postgres::NoTls)
        .await
        .expect("the SQL reader connects");
    tokio::spawn(connection);
    let row = reader
        .query_one(
            "SELECT (SELECT count(*) FROM chinook.track),
                    (SELECT count(*) FROM lahman.people) > 0,
                    (SELECT count(*) FROM nycflights13.flights) > 0",
            &[],
        )
        .await
        .expect("parley_sql_reader may read the three schemas");
    assert_eq!(
        (
            row.get::<_, i64>(0),
            row.get::<_, bool>(1),
            row.get::<_, bool>(2)
        ),
        (3503, true, true)
    );
}
