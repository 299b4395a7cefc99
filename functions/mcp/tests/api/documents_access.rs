//! What the documents tools tell a caller about collections and documents they may not read:
//! nothing, not even that they exist ("not found or not yours" alike), and a caller who may
//! read no collection at all is told so, and how to fix it, rather than finding nothing.
//! Small collections are made by hand here; the manual's slice is `tests/documents.rs`'s.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use parley_testkit::TestDb;
use parley_testkit::domains::DOCUMENTS_TOOLS;
use serde_json::{Value, json};

use crate::helpers::{Options, TestApp, env, spawn_on};

const SECRET: &str = "a-documents-access-secret-of-32-bytes+";

/// Two collections, one with a member, each with one document; no chunks (every refusal
/// here comes before a chunk would be scanned).
const SETUP: &str = "
INSERT INTO parley.collections (name, title, embedding_model, embedding_dims) VALUES
    ('mine', 'My course', 'all-MiniLM-L6-v2@384', 384),
    ('theirs', 'Secret merger plans', 'all-MiniLM-L6-v2@384', 384);
INSERT INTO parley.documents (collection_id, uri, title, content_hash)
    SELECT id, name || '.html', 'A page of ' || title, 'h' FROM parley.collections;
INSERT INTO parley.sections (document_id, collection_id, ord, text)
    SELECT id, collection_id, 0, 'The text of ' || uri FROM parley.documents;
INSERT INTO parley.memberships (collection_id, kind, principal)
    SELECT id, 'user', 'student' FROM parley.collections WHERE name = 'mine';
";

async fn spawn_documents() -> TestApp {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute(SETUP)
        .await
        .expect("set-up");
    spawn_on(
        db,
        Options {
            extra_env: env(&[
                ("TOOLS_FILE", DOCUMENTS_TOOLS),
                ("JWT_SECRET", SECRET),
                ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp"),
                (
                    "EMBEDDINGS_MODEL_DIR",
                    &parley_testkit::model_dir().display().to_string(),
                ),
            ]),
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts with the documents tools")
}

fn user(sub: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": sub, "exp": get_current_timestamp() + 600}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("token")
}

/// A call as `token` (the service token when `None`): `Ok(rows)` or `Err(message)`.
async fn call(
    app: &TestApp,
    token: Option<&str>,
    tool: &str,
    args: Value,
) -> Result<Value, String> {
    let token = token.or(app.token.as_deref());
    let (status, body) = app
        .rpc_with(
            token,
            "tools/call",
            json!({"name": tool, "arguments": args}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let result = &body["result"];
    if result["isError"] == true {
        Err(result["content"][0]["text"].as_str().unwrap().to_owned())
    } else {
        Ok(result["structuredContent"]["rows"].clone())
    }
}

#[tokio::test]
async fn a_search_by_a_caller_who_may_read_no_collection_says_so_and_how_to_fix_it() {
    let app = spawn_documents().await;
    let query = json!({"query": "merger"});
    let service = call(&app, None, "search_documents", query.clone())
        .await
        .unwrap_err();
    assert_eq!(
        service,
        "you may read no collection: this call carries no user (it came with the service \
         token) and no collection is public; call as a signed-in user (through the chat, or \
         with a user token), or make a collection public (parley ingest --public)"
    );
    let stranger = call(
        &app,
        Some(&user("stranger")),
        "search_documents",
        query.clone(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        stranger,
        "you may read no collection: you are not enrolled in any, and none is public; ask \
         whoever runs Parley to enroll you (parley enroll --collection NAME --user <your \
         subject>)"
    );
    // A caller who may read something finds what there is (here: nothing), without a hint.
    let student = call(
        &app,
        Some(&user("student")),
        "search_documents",
        query.clone(),
    )
    .await;
    assert_eq!(student, Ok(json!([])));
    app.db
        .client()
        .await
        .batch_execute("UPDATE parley.collections SET public = true WHERE name = 'mine'")
        .await
        .unwrap();
    assert_eq!(
        call(&app, None, "search_documents", query).await,
        Ok(json!([]))
    );
}

#[tokio::test]
async fn a_collection_or_document_the_caller_may_not_read_is_refused_as_if_it_did_not_exist() {
    let app = spawn_documents().await;
    let student = user("student");
    let search = |collection: &'static str| {
        let student = student.clone();
        let app = &app;
        async move {
            call(
                app,
                Some(&student),
                "search_documents",
                json!({"query": "plans", "collection": collection}),
            )
            .await
            .unwrap_err()
        }
    };
    let hidden = search("theirs").await;
    let missing = search("nowhere").await;
    assert_eq!(
        hidden,
        "there is no collection named \"theirs\" that you may read (it does not exist, or you \
         are not enrolled in it); list_collections shows the ones you may read"
    );
    assert_eq!(hidden.replace("theirs", "nowhere"), missing);

    let read = |uri: &'static str| {
        let student = student.clone();
        let app = &app;
        async move {
            call(app, Some(&student), "read_document", json!({"uri": uri}))
                .await
                .unwrap_err()
        }
    };
    let hidden = read("theirs.html").await;
    let missing = read("nowhere.html").await;
    assert_eq!(
        hidden,
        "there is no document with uri \"theirs.html\" that you may read (it does not exist, or \
         it is in a collection you are not enrolled in); search_documents gives the ids and \
         uris of the ones you may read"
    );
    assert_eq!(hidden.replace("theirs", "nowhere"), missing);
    assert!(
        !hidden.contains("merger"),
        "the title stays hidden: {hidden}"
    );
    // The student's own document reads.
    let own = call(
        &app,
        Some(&student),
        "read_document",
        json!({"uri": "mine.html"}),
    )
    .await
    .unwrap();
    assert_eq!(own[0]["collection"], "mine", "{own}");
}
