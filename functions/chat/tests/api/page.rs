//! The chat page's routes: `GET /` and its assets (types, CSP, revalidation) and `GET /api/page`
//! (the settings the page starts from). What the page does is tests/page/run's, in a browser.

use serde_json::json;

use crate::helpers::{Options, TestChat, spawn};

async fn chat(extra_env: Vec<(&'static str, String)>) -> TestChat {
    spawn(Options {
        mcp_down: true,
        extra_env,
        ..Options::default()
    })
    .await
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header"))
}

/// The page's files as they are in `functions/chat/page/`: (path served at, content type,
/// content). Every ES module there, so one the server forgets to serve fails here.
fn page_files() -> Vec<(String, &'static str, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("page");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let content = std::fs::read_to_string(dir.join(&name)).unwrap();
        let (path, content_type) = match (name.as_str(), name.rsplit_once('.')) {
            ("index.html", _) => ("/".to_owned(), "text/html; charset=utf-8"),
            (_, Some((_, "js"))) => (format!("/assets/{name}"), "text/javascript; charset=utf-8"),
            (_, Some((_, "css"))) => (format!("/assets/{name}"), "text/css; charset=utf-8"),
            _ => panic!("page/{name}: a file of a kind this test does not know"),
        };
        files.push((path, content_type, content));
    }
    files.sort();
    files
}

/// Classic scripts the page adds when it first needs them (page.rs's `LIBRARIES`): served like
/// the modules, never bundled.
const LIBRARIES: &[&str] = &["charts-lib.js"];

/// `script` holds every module of `files` once, each under a `// --- <file> ---` line with its
/// lines where they were (an import dropped leaves a blank line, `export` is dropped), the entry
/// module (app.js) last, and imports nothing: the browser has nothing more to fetch.
fn assert_bundles(script: &str, files: &[(String, &'static str, String)]) {
    let mut modules: Vec<(usize, &str, &str)> = Vec::new();
    for (path, _, content) in files {
        let Some(file) = path.strip_prefix("/assets/") else {
            continue;
        };
        if !file.ends_with(".js") || file == "page.js" {
            continue;
        }
        if LIBRARIES.contains(&file) {
            assert!(
                !script.contains(&format!("// --- {file} ---")),
                "{file} bundled"
            );
            continue;
        }
        let marker = format!("// --- {file} ---\n");
        assert_eq!(script.matches(&marker).count(), 1, "{file}");
        let at = script.find(&marker).unwrap() + marker.len();
        modules.push((at, file, content));
    }
    modules.sort();
    assert_eq!(
        modules.last().map(|m| m.1),
        Some("app.js"),
        "the entry module runs last"
    );
    for (at, file, content) in modules {
        let kept: Vec<&str> = script[at..]
            .lines()
            .take_while(|l| !l.starts_with("// --- "))
            .collect();
        assert_eq!(kept.len(), content.lines().count(), "{file}");
        for (n, (source, kept)) in content.lines().zip(kept).enumerate() {
            let declaration = source.strip_prefix("export ").unwrap_or(source);
            assert!(
                kept == declaration || kept.is_empty(),
                "{file}:{}: {source:?} became {kept:?}",
                n + 1
            );
        }
    }
    for line in script.lines() {
        assert!(
            !line.starts_with("import ") && !line.starts_with("export "),
            "{line}"
        );
    }
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_without_a_token_under_a_strict_policy() {
    let app = chat(vec![]).await;
    let http = reqwest::Client::new();
    let mut files = page_files();
    // The page, its stylesheet, its entry module and the modules that one imports.
    let modules = files.iter().filter(|f| f.0.ends_with(".js")).count();
    assert!(modules > 10, "{modules} modules");
    // And the one script the page loads, those modules bundled (its content is checked below).
    let script = "/assets/page.js".to_owned();
    files.push((
        script.clone(),
        "text/javascript; charset=utf-8",
        String::new(),
    ));
    for (path, content_type, content) in &files {
        let response = http
            .get(format!("{}{path}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(header(&response, "content-type"), *content_type, "{path}");
        let csp = header(&response, "content-security-policy");
        assert!(csp.starts_with("default-src 'self';"), "{csp}");
        assert!(csp.contains("script-src 'self';"), "{csp}");
        assert!(!csp.contains("unsafe-"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert_eq!(header(&response, "x-content-type-options"), "nosniff");
        assert_eq!(header(&response, "cache-control"), "no-cache");
        let etag = header(&response, "etag").to_owned();
        let body = response.text().await.unwrap();
        if *path == script {
            assert_bundles(&body, &files);
        } else {
            assert_eq!(&body, content, "{path}");
        }

        // The browser's copy is still good: 304, no body.
        let again = http
            .get(format!("{}{path}", app.base))
            .header("if-none-match", &etag)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 304, "{path}");
        assert_eq!(header(&again, "etag"), etag);
        assert!(again.text().await.unwrap().is_empty());
        let stale = http
            .get(format!("{}{path}", app.base))
            .header("if-none-match", "\"0000000000000000\"")
            .send()
            .await
            .unwrap();
        assert_eq!(stale.status(), 200, "{path}");

        // HEAD: the same headers, no body.
        let head = http
            .head(format!("{}{path}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), 200, "{path}");
        assert_eq!(header(&head, "content-type"), *content_type, "{path}");
        assert_eq!(header(&head, "etag"), etag, "{path}");
        assert!(header(&head, "content-security-policy").contains("script-src 'self';"));
        assert!(head.text().await.unwrap().is_empty(), "{path}");
    }

    // Only the page's own files: anything else under /assets/ is not found.
    for path in [
        "/assets/missing.js",
        "/assets/index.html",
        "/assets/",
        "/assets/..%2Fsrc%2Fpage.rs",
    ] {
        let response = http
            .get(format!("{}{path}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }

    // The page's script is loaded from this origin only, never inline: one module script, the
    // page's modules bundled, so a first load is three requests (page, stylesheet, script).
    let html = http
        .get(format!("{}/", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains(r#"<script type="module" src="assets/page.js"></script>"#));
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    assert!(!html.contains("http://") && !html.contains("https://"));
}

#[tokio::test]
async fn api_page_says_how_to_sign_in_and_offers_no_picker_or_examples_by_default() {
    let app = chat(vec![("ASSISTANT_NAME", "Taskbot".into())]).await;
    let (status, body) = app.get(None, "/api/page").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"assistant": "Taskbot", "auth": "token", "context_options": null,
               "model_problem": null, "examples": null, "stream_url": null,
               "sign_in": null})
    );

    let local = chat(vec![("CHAT_AUTH", "none".into())]).await;
    let (_, body) = local.get(None, "/api/page").await;
    assert_eq!(body["auth"], "none");
    assert_eq!(body["assistant"], "Parley");
}

#[tokio::test]
async fn api_page_offers_the_configured_context_options() {
    let options = json!({"label": "Project", "options": [
        {"label": "Apollo", "context": {"project": {"code": "P-0023", "label": "Apollo"}}},
        {"label": "Gemini", "context": {"project": "Gemini"}},
    ]});
    let app = chat(vec![("PAGE_CONTEXT_OPTIONS", options.to_string())]).await;
    let (status, body) = app.get(None, "/api/page").await;
    assert_eq!(status, 200);
    assert_eq!(body["context_options"], options);
}

#[tokio::test]
async fn api_page_offers_the_configured_example_questions() {
    let examples = json!(["Which districts are in Kent?", "What is on my task list?"]);
    let app = chat(vec![("PAGE_EXAMPLES", examples.to_string())]).await;
    let (status, body) = app.get(None, "/api/page").await;
    assert_eq!(status, 200);
    assert_eq!(body["examples"], examples);
}

#[tokio::test]
async fn a_stream_url_reaches_the_page_and_its_origin_the_policy() {
    let stream = "https://abc123.lambda-url.eu-west-1.on.aws/";
    let app = chat(vec![("PAGE_STREAM_URL", stream.into())]).await;
    let (status, body) = app.get(None, "/api/page").await;
    assert_eq!(status, 200);
    assert_eq!(body["stream_url"], stream);
    let page = reqwest::get(format!("{}/", app.base)).await.unwrap();
    let csp = header(&page, "content-security-policy");
    assert!(
        csp.contains("connect-src 'self' https://abc123.lambda-url.eu-west-1.on.aws;"),
        "{csp}"
    );

    let env = parley_core::config::Env::from_pairs([
        ("DATABASE_URL", "postgres://u@localhost/db"),
        ("CHAT_AUTH", "none"),
        ("MCP_URL", "http://127.0.0.1:3001/mcp"),
        ("LISTEN_ADDR", "127.0.0.1:0"),
        (
            "PAGE_STREAM_URL",
            "https://abc123.lambda-url.eu-west-1.on.aws/api/chat",
        ),
    ]);
    let Err(e) = parley_chat::Application::build(env).await else {
        panic!("a stream URL that is not a base URL was accepted");
    };
    assert!(e.to_string().contains("PAGE_STREAM_URL"), "{e}");
}

#[tokio::test]
async fn a_bad_context_options_setting_stops_start_up_naming_it() {
    let env = parley_core::config::Env::from_pairs([
        ("DATABASE_URL", "postgres://u@localhost/db"),
        ("CHAT_AUTH", "none"),
        ("MCP_URL", "http://127.0.0.1:3001/mcp"),
        ("LISTEN_ADDR", "127.0.0.1:0"),
        (
            "PAGE_CONTEXT_OPTIONS",
            r#"{"label": "District", "options": [{"label": "Leeds", "context": "Leeds"}]}"#,
        ),
    ]);
    let Err(e) = parley_chat::Application::build(env).await else {
        panic!("started with a bad PAGE_CONTEXT_OPTIONS");
    };
    let text = e.to_string();
    assert!(text.contains("PAGE_CONTEXT_OPTIONS"), "{text}");
    assert!(text.contains("options[0].context"), "{text}");
}
