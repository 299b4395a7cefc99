//! The page's sign-in settings (`OIDC_*`): what `GET /api/page` says about the provider, the
//! policy that lets the page reach its token endpoint, what the page hears when the provider's
//! discovery document cannot be used, and half configurations refused at start-up. The flow
//! itself, against a real provider in a browser, is tests/page/run's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::http::StatusCode;
use axum::routing::get;
use parley_core::config::Env;
use serde_json::{Value, json};

use crate::helpers::{Options, TestChat, spawn};

/// A provider's discovery document at `/.well-known/openid-configuration`, as `document(base)`
/// writes it; counts the fetches.
struct Provider {
    base: String,
    fetches: Arc<AtomicUsize>,
}

async fn provider(status: StatusCode, document: impl Fn(&str) -> Value) -> Provider {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let fetches = Arc::new(AtomicUsize::new(0));
    let body = document(&base);
    let counter = fetches.clone();
    let app = axum::Router::new().route(
        "/.well-known/openid-configuration",
        get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            async move { (status, Json(body)) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Provider { base, fetches }
}

fn document(base: &str) -> Value {
    json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/auth"),
        // Another origin than the issuer's, as Cognito's token endpoint is on its own domain.
        "token_endpoint": "http://127.0.0.2:9/oauth2/token",
        "end_session_endpoint": format!("{base}/session/end"),
        "jwks_uri": format!("{base}/jwks"),
        "code_challenge_methods_supported": ["S256"],
    })
}

async fn chat_signing_in_with(provider: &Provider, extra: &[(&'static str, &str)]) -> TestChat {
    let mut extra_env = vec![
        ("OIDC_ISSUER", provider.base.clone()),
        ("OIDC_CLIENT_ID", "parley-page".to_owned()),
        ("JWT_JWKS_URL", format!("{}/jwks", provider.base)),
    ];
    extra_env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
    spawn(Options {
        mcp_down: true,
        extra_env,
        ..Options::default()
    })
    .await
}

async fn csp(app: &TestChat, path: &str) -> String {
    let response = reqwest::get(format!("{}{path}", app.base)).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn api_page_tells_the_page_how_to_sign_in_with_the_discovered_endpoints() {
    let idp = provider(StatusCode::OK, document).await;
    let app = chat_signing_in_with(&idp, &[("OIDC_SCOPES", "openid email offline_access")]).await;
    let (status, body) = app.get(None, "/api/page").await;
    assert_eq!(status, 200);
    assert_eq!(body["auth"], "token");
    assert_eq!(
        body["sign_in"],
        json!({
            "issuer": idp.base,
            "client_id": "parley-page",
            "scopes": "openid email offline_access",
            "redirect_path": "/",
            "authorization_endpoint": format!("{}/auth", idp.base),
            "token_endpoint": "http://127.0.0.2:9/oauth2/token",
            "end_session_endpoint": format!("{}/session/end", idp.base),
            "end_session_style": "oidc",
            "unavailable": null,
        })
    );

    // The page may post to the token endpoint's origin, and to no other.
    for path in ["/", "/assets/page.js", "/api/page"] {
        let csp = csp(&app, path).await;
        assert!(
            csp.contains("connect-src 'self' http://127.0.0.2:9;"),
            "{path}: {csp}"
        );
        assert!(!csp.contains(&idp.base), "{path}: {csp}");
    }
    // Fetched once for the instance, however many pages are served.
    assert_eq!(idp.fetches.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_end_session_url_setting_replaces_a_missing_end_session_endpoint() {
    let idp = provider(StatusCode::OK, |base| {
        let mut doc = document(base);
        doc.as_object_mut().unwrap().remove("end_session_endpoint");
        doc
    })
    .await;
    let app = chat_signing_in_with(
        &idp,
        &[("OIDC_END_SESSION_URL", "https://auth.example.org/logout")],
    )
    .await;
    let (_, body) = app.get(None, "/api/page").await;
    assert_eq!(
        body["sign_in"]["end_session_endpoint"],
        "https://auth.example.org/logout"
    );
    assert_eq!(body["sign_in"]["end_session_style"], "logout_uri");
}

#[tokio::test]
async fn a_provider_whose_discovery_fails_leaves_the_page_saying_why() {
    let broken = provider(StatusCode::SERVICE_UNAVAILABLE, document).await;
    let other = provider(StatusCode::OK, |_| document("https://someone-else.example")).await;
    let no_pkce = provider(StatusCode::OK, |base| {
        let mut doc = document(base);
        doc["code_challenge_methods_supported"] = json!(["plain"]);
        doc
    })
    .await;
    let huge = provider(StatusCode::OK, |base| {
        let mut doc = document(base);
        doc["op_policy_uri"] = json!("x".repeat(300 * 1024));
        doc
    })
    .await;
    for (idp, reason) in [
        (&broken, "answered HTTP 503".to_owned()),
        (&huge, "larger than 262144 bytes".to_owned()),
        (
            &other,
            "names issuer \"https://someone-else.example\", not OIDC_ISSUER".to_owned(),
        ),
        (&no_pkce, "lacks S256".to_owned()),
    ] {
        let app = chat_signing_in_with(idp, &[]).await;
        let (status, body) = app.get(None, "/api/page").await;
        assert_eq!(status, 200);
        let sign_in = &body["sign_in"];
        let unavailable = sign_in["unavailable"].as_str().unwrap_or_default();
        assert!(unavailable.contains(&reason), "{unavailable}");
        assert_eq!(sign_in["token_endpoint"], Value::Null);
        assert_eq!(sign_in["authorization_endpoint"], Value::Null);
        assert_eq!(sign_in["client_id"], "parley-page");
        // The page still loads, to say so; nothing else may be reached.
        let csp = csp(&app, "/").await;
        assert!(csp.contains("connect-src 'self';"), "{csp}");
        // Kept for a while rather than asked again by every page load.
        assert_eq!(idp.fetches.load(Ordering::SeqCst), 1);
    }

    // Nobody listening at all: the same, with the cause.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let idp = Provider {
        base: gone,
        fetches: Arc::new(AtomicUsize::new(0)),
    };
    let app = chat_signing_in_with(&idp, &[]).await;
    let (status, body) = app.get(None, "/api/page").await;
    assert_eq!(status, 200);
    let unavailable = body["sign_in"]["unavailable"].as_str().unwrap_or_default();
    assert!(
        unavailable.contains("could not be fetched"),
        "{unavailable}"
    );
}

#[tokio::test]
async fn half_a_sign_in_configuration_stops_start_up_naming_the_setting() {
    let base = [
        ("DATABASE_URL", "postgres://u@localhost/db"),
        ("MCP_URL", "http://127.0.0.1:3001/mcp"),
        ("MCP_AUTH_TOKEN", "a-service-token"),
        ("LISTEN_ADDR", "127.0.0.1:0"),
        ("JWT_SECRET", "a-shared-secret-for-the-test-of-32-bytes"),
        ("JWT_JWKS_URL", "https://id.example.org/jwks"),
        ("OIDC_ISSUER", "https://id.example.org"),
        ("OIDC_CLIENT_ID", "parley-page"),
    ];
    for (change, var, words) in [
        (("OIDC_CLIENT_ID", ""), "OIDC_CLIENT_ID", "must be set when"),
        (("OIDC_ISSUER", ""), "OIDC_ISSUER", "OIDC_CLIENT_ID"),
        (
            ("OIDC_ISSUER", "ftp://id.example.org"),
            "OIDC_ISSUER",
            "http(s)",
        ),
        (("CHAT_AUTH", "none"), "OIDC_ISSUER", "CHAT_AUTH=jwt"),
        (("JWT_JWKS_URL", ""), "OIDC_ISSUER", "JWT_JWKS_URL"),
        (
            ("JWT_ISSUER", "https://other.example.org"),
            "JWT_ISSUER",
            "must equal OIDC_ISSUER",
        ),
        (("OIDC_SCOPES", "email"), "OIDC_SCOPES", "openid"),
        (
            ("OIDC_REDIRECT_PATH", "https://evil.example/"),
            "OIDC_REDIRECT_PATH",
            "path",
        ),
    ] {
        let mut pairs = base.to_vec();
        pairs.retain(|(k, _)| *k != change.0);
        pairs.push(change);
        let Err(e) = parley_chat::Application::build(Env::from_pairs(pairs)).await else {
            panic!("started with {change:?}");
        };
        let text = e.to_string();
        assert!(
            text.contains(var) && text.contains(words),
            "{change:?}: {text}"
        );
    }
    let ok = parley_chat::Application::build(Env::from_pairs(base)).await;
    assert!(ok.is_ok(), "the whole configuration was refused");
}
