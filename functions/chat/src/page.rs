//! The chat page for people: `GET /` and its assets (a stylesheet and the ES modules of its
//! script, listed in [`FILES`]), compiled into the binary from `page/` (no files on disk, no
//! build step, no server of its own, no request leaves for another host), and `GET /api/page`,
//! what the page must know before its first API call.
//!
//! Nothing here reads a token: the page is the same for everyone, and what `/api/page` tells
//! (the assistant's name, whether to ask for a token or how to sign in, the picker's options,
//! the example questions) is settings, not data. The page itself then calls the API with the caller's token like any other client.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use bytes::Bytes;
use parley_core::config::{ConfigError, Env};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::auth::AuthMode;
use crate::sign_in::{Discovery, SignInInfo};

/// What the browser may load and run: this origin only (and the streaming URL's, for the
/// page's streamed turns, and the sign-in provider's token endpoint, which the page posts the
/// authorization code to), no inline script or style, never inside another site's frame. The
/// Markdown the page renders is built as DOM nodes, not HTML, so this is a second wall, not
/// the first. Going to the provider's login and sign-out pages is navigation, which
/// `connect-src` does not govern.
pub fn content_security_policy(
    stream_url: Option<&StreamUrl>,
    token_endpoint: Option<&url::Url>,
) -> String {
    let mut connect = vec!["'self'".to_owned()];
    let origins = [
        stream_url.map(StreamUrl::origin),
        token_endpoint.map(|url| url.origin().ascii_serialization()),
    ];
    for origin in origins.into_iter().flatten() {
        if !connect.contains(&origin) {
            connect.push(origin);
        }
    }
    format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
         connect-src {}; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'",
        connect.join(" ")
    )
}

/// What `GET /api/page` tells the page, all fixed at start-up but the sign-in provider's
/// endpoints, discovered on first use.
pub struct PageSettings<'a> {
    /// `ASSISTANT_NAME`.
    pub assistant: &'a str,
    pub auth: AuthMode,
    /// `PAGE_CONTEXT_OPTIONS`: the picker.
    pub context_options: Option<&'a ContextOptions>,
    /// Why no model can be asked, so the page says so before anyone types.
    pub model_problem: Option<&'a str>,
    /// `PAGE_EXAMPLES`: questions the first screen offers.
    pub examples: Option<&'a Examples>,
    /// `PAGE_STREAM_URL`: where the page sends its streamed turns instead of this origin.
    pub stream_url: Option<&'a StreamUrl>,
    /// `OIDC_*`: the provider the page signs people in with.
    pub sign_in: Option<Arc<Discovery>>,
}

/// The routes: `GET /` and each asset of [`FILES`] (HEAD too), and `GET /api/page`.
pub fn router(settings: &PageSettings<'_>) -> Router {
    let info = json!({
        "assistant": settings.assistant,
        "auth": match settings.auth {
            AuthMode::Jwt => "token",
            AuthMode::Disabled => "none",
        },
        "context_options": settings.context_options,
        "model_problem": settings.model_problem,
        "examples": settings.examples,
        "stream_url": settings.stream_url.map(StreamUrl::as_str),
        "sign_in": null,
    });
    let Some(discovery) = settings.sign_in.clone() else {
        // Nothing to discover: every response is fixed.
        let csp = csp_header(settings.stream_url, None);
        let mut router = Router::new();
        for &(path, body, content_type) in FILES {
            let asset = Asset::new(Bytes::from_static(body.as_bytes()), content_type);
            router = router.route(path, asset.route(csp.clone()));
        }
        let info = Asset::new(Bytes::from(info.to_string()), "application/json");
        return router.route("/api/page", info.route(csp));
    };
    // The policy and `/api/page` wait for the provider's endpoints (fetched once per instance):
    // the page posts to its token endpoint, which the policy must allow.
    let page = Arc::new(SignInPage {
        discovery,
        info,
        stream_url: settings.stream_url.cloned(),
    });
    let mut router = Router::new();
    for &(path, body, content_type) in FILES {
        let asset = Arc::new(Asset::new(
            Bytes::from_static(body.as_bytes()),
            content_type,
        ));
        let page = page.clone();
        router = router.route(
            path,
            get(move |request: HeaderMap| async move {
                let (csp, _) = page.current().await;
                asset.serve(&request, &csp)
            }),
        );
    }
    router.route(
        "/api/page",
        get(move |request: HeaderMap| async move {
            let (csp, info) = page.current().await;
            info.serve(&request, &csp)
        }),
    )
}

fn csp_header(stream_url: Option<&StreamUrl>, token_endpoint: Option<&url::Url>) -> HeaderValue {
    // Built from URLs' origins (ASCII) and fixed text: always a valid header value.
    HeaderValue::try_from(content_security_policy(stream_url, token_endpoint))
        .expect("origins and fixed text make a header value")
}

/// The page's responses when it signs people in: they depend on what discovery found.
struct SignInPage {
    discovery: Arc<Discovery>,
    /// `/api/page` without `sign_in`.
    info: Value,
    stream_url: Option<StreamUrl>,
}

impl SignInPage {
    /// The policy and `/api/page` as the provider's endpoints (or why they are unknown) stand.
    async fn current(&self) -> (HeaderValue, Asset) {
        let endpoints = self.discovery.endpoints().await;
        let token = endpoints.as_ref().ok().map(|e| &e.token);
        let csp = csp_header(self.stream_url.as_ref(), token);
        let sign_in = SignInInfo::new(self.discovery.settings(), endpoints.as_deref());
        let mut info = self.info.clone();
        info["sign_in"] = json!(sign_in);
        (
            csp,
            Asset::new(Bytes::from(info.to_string()), "application/json"),
        )
    }
}

/// `/assets/<file>`, served from `page/<file>` as `content_type`.
macro_rules! asset {
    ($file:literal, $content_type:expr) => {
        (
            concat!("/assets/", $file),
            include_str!(concat!("../page/", $file)),
            $content_type,
        )
    };
}

/// The page's files: (path, body, content type). A new module of the page is one `asset!` line
/// here, and a module imports only those listed below it (app.js's header says what each is for;
/// `modules_import_only_the_modules_below_them` keeps the order true). Assets stay flat under
/// `/assets/`: template.yaml's HTTP API routes `GET /assets/{asset}`, one path segment.
const FILES: &[(&str, &str, &str)] = &[
    ("/", include_str!("../page/index.html"), HTML),
    asset!("app.css", CSS),
    asset!("app.js", JS),
    asset!("sign-in.js", JS),
    asset!("composer.js", JS),
    asset!("approvals.js", JS),
    asset!("turn.js", JS),
    asset!("conversations.js", JS),
    asset!("context.js", JS),
    asset!("reply.js", JS),
    asset!("approval-card.js", JS),
    asset!("http.js", JS),
    asset!("session.js", JS),
    asset!("problems.js", JS),
    asset!("busy.js", JS),
    asset!("stream.js", JS),
    asset!("markdown.js", JS),
    asset!("state.js", JS),
    asset!("dom.js", JS),
];

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
/// What browsers require of a module script (they refuse one served as anything else).
const JS: &str = "text/javascript; charset=utf-8";

/// One fixed response body, with the validator browsers revalidate it by.
#[derive(Clone)]
struct Asset {
    body: Bytes,
    content_type: HeaderValue,
    etag: HeaderValue,
}

impl Asset {
    fn new(body: Bytes, content_type: &'static str) -> Self {
        let etag = format!("\"{:016x}\"", fnv1a(&body));
        Self {
            body,
            content_type: HeaderValue::from_static(content_type),
            // Quotes and hex digits only: always a valid header value.
            etag: HeaderValue::try_from(etag).expect("a quoted hex string is a header value"),
        }
    }

    /// `GET` (and so `HEAD`) of this asset, under `csp`.
    fn route<S: Clone + Send + Sync + 'static>(self, csp: HeaderValue) -> MethodRouter<S> {
        get(move |request: HeaderMap| std::future::ready(self.serve(&request, &csp)))
    }

    /// The body, or 304 when the browser already holds this version. `no-cache` makes it ask
    /// every time (a deployment changes the files under the same names), and the ETag keeps
    /// that question to a few hundred bytes.
    fn serve(&self, request: &HeaderMap, csp: &HeaderValue) -> Response {
        let held = request
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|tag| tag.trim().trim_start_matches("W/"))
            .any(|tag| tag == "*" || tag.as_bytes() == self.etag.as_bytes());
        let headers = [
            (header::ETAG, self.etag.clone()),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (header::CONTENT_SECURITY_POLICY, csp.clone()),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ];
        if held {
            return (StatusCode::NOT_MODIFIED, headers).into_response();
        }
        let content_type: [(HeaderName, HeaderValue); 1] =
            [(header::CONTENT_TYPE, self.content_type.clone())];
        (headers, content_type, self.body.clone()).into_response()
    }
}

/// FNV-1a, 64 bits: the assets' ETags only need to change when a file does.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `PAGE_STREAM_URL`: the base URL of a chat that streams turns when this one cannot (a
/// deployment's streaming Function URL, while the page is served through API Gateway, which
/// buffers). The page posts its streamed turns to `<url>api/chat` and everything else to its
/// own origin. An absolute `http(s)` URL whose path ends in `/`, without query or fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamUrl(url::Url);

impl StreamUrl {
    pub const SETTING: &str = "PAGE_STREAM_URL";

    /// The setting, if set and not blank.
    pub fn from_env(env: &Env) -> Result<Option<Self>, ConfigError> {
        match env.get(Self::SETTING).map(str::trim) {
            None | Some("") => Ok(None),
            Some(raw) => Self::parse(raw).map(Some),
        }
    }

    pub fn parse(raw: &str) -> Result<Self, ConfigError> {
        let bad = |problem: &str| ConfigError::new(Self::SETTING, problem);
        let url = url::Url::parse(raw).map_err(|_| {
            bad("must be an absolute URL such as https://<id>.lambda-url.<region>.on.aws/")
        })?;
        if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
            return Err(bad("must be an http(s) URL with a host"));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(bad("must have no query, fragment or credentials"));
        }
        if !url.path().ends_with('/') {
            return Err(bad("must end in `/`: the page adds `api/chat` to it"));
        }
        Ok(Self(url))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// `scheme://host[:port]`, as a Content-Security-Policy source and CORS names it.
    pub fn origin(&self) -> String {
        self.0.origin().ascii_serialization()
    }
}

/// `PAGE_CONTEXT_OPTIONS`: a picker on the page whose choice is sent as the turn's `context`,
/// as a map or a list front end would send what its user is looking at. Absent, no picker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextOptions {
    /// What the picker is called on the page ("District").
    pub label: String,
    pub options: Vec<ContextOption>,
}

/// One choice of the picker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextOption {
    pub label: String,
    /// Sent as `context` as it is: a non-empty object without NUL characters, no larger than
    /// `MAX_CONTEXT_BYTES` serialized, so the chat never refuses it.
    pub context: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptions {
    label: String,
    options: Vec<RawOption>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOption {
    label: String,
    context: Map<String, Value>,
}

impl ContextOptions {
    pub const SETTING: &str = "PAGE_CONTEXT_OPTIONS";
    /// More would not fit a picker anyone could use.
    const MAX_OPTIONS: usize = 500;
    const MAX_LABEL_CHARS: usize = 64;

    /// The setting, if set; `max_context_bytes` is `MAX_CONTEXT_BYTES`.
    pub fn from_env(env: &Env, max_context_bytes: usize) -> Result<Option<Self>, ConfigError> {
        env.get(Self::SETTING)
            .map(|raw| Self::parse(raw, max_context_bytes))
            .transpose()
    }

    pub fn parse(raw: &str, max_context_bytes: usize) -> Result<Self, ConfigError> {
        let bad = |problem: String| ConfigError::new(Self::SETTING, problem);
        let mut de = serde_json::Deserializer::from_str(raw);
        let parsed: RawOptions = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| {
                bad(format!(
                    "must be JSON {{\"label\", \"options\": [{{\"label\", \"context\": {{...}}}}]}}: \
                     {} at `{}`",
                    e.inner(),
                    e.path()
                ))
            })
            .and_then(|p| de.end().map(|()| p).map_err(|e| bad(e.to_string())))?;
        let label = Self::label(&parsed.label).ok_or_else(|| {
            bad("`label` must be 1 to 64 characters without control characters".into())
        })?;
        if parsed.options.is_empty() || parsed.options.len() > Self::MAX_OPTIONS {
            return Err(bad(format!(
                "`options` must list 1 to {} choices",
                Self::MAX_OPTIONS
            )));
        }
        let mut options: Vec<ContextOption> = Vec::with_capacity(parsed.options.len());
        for (i, option) in parsed.options.into_iter().enumerate() {
            let at = format!("options[{i}]");
            let label = Self::label(&option.label).ok_or_else(|| {
                bad(format!(
                    "`{at}.label` must be 1 to 64 characters without control characters"
                ))
            })?;
            if options.iter().any(|o| o.label == label) {
                return Err(bad(format!("`{at}.label` {label:?} is used twice")));
            }
            let context = option.context;
            if context.is_empty() {
                return Err(bad(format!("`{at}.context` is empty")));
            }
            if context
                .iter()
                .any(|(key, value)| key.contains('\0') || crate::nul::has_nul(value))
            {
                return Err(bad(format!("`{at}.context` holds a NUL character")));
            }
            // As `POST /api/chat` measures it.
            let size = Value::Object(context.clone()).to_string().len();
            if size > max_context_bytes {
                return Err(bad(format!(
                    "`{at}.context` is {size} bytes serialized, more than MAX_CONTEXT_BYTES \
                     ({max_context_bytes}): every turn sent with it would be refused"
                )));
            }
            options.push(ContextOption { label, context });
        }
        Ok(Self { label, options })
    }

    /// A label as shown: trimmed, 1-64 characters, none of them control characters.
    fn label(raw: &str) -> Option<String> {
        let label = raw.trim();
        let chars = label.chars().count();
        ((1..=Self::MAX_LABEL_CHARS).contains(&chars) && !label.chars().any(char::is_control))
            .then(|| label.to_owned())
    }
}

/// `PAGE_EXAMPLES`: questions the page offers on an empty conversation, so a new user sees
/// what the tools can answer. They come from the deployment (`scripts/dev` passes the demo
/// domains' `domains/page-examples.json`), never from the engine, which knows no domain.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Examples(Vec<String>);

impl Examples {
    pub const SETTING: &str = "PAGE_EXAMPLES";
    /// More would not fit a first screen anyone reads.
    const MAX_EXAMPLES: usize = 12;
    /// A question, not an essay: one or two lines on the page.
    const MAX_EXAMPLE_CHARS: usize = 200;

    /// The setting, if set; `max_message_chars` is `MAX_MESSAGE_CHARS`.
    pub fn from_env(env: &Env, max_message_chars: usize) -> Result<Option<Self>, ConfigError> {
        env.get(Self::SETTING)
            .map(|raw| Self::parse(raw, max_message_chars))
            .transpose()
    }

    /// A JSON list of 1 to 12 questions, each 1 to 200 characters (and no longer than
    /// `MAX_MESSAGE_CHARS`, so sending one is never refused), without control characters.
    pub fn parse(raw: &str, max_message_chars: usize) -> Result<Self, ConfigError> {
        let bad = |problem: String| ConfigError::new(Self::SETTING, problem);
        let list: Vec<String> = serde_json::from_str(raw)
            .map_err(|e| bad(format!("must be a JSON list of questions (strings): {e}")))?;
        if list.is_empty() || list.len() > Self::MAX_EXAMPLES {
            return Err(bad(format!(
                "must list 1 to {} questions",
                Self::MAX_EXAMPLES
            )));
        }
        let most = Self::MAX_EXAMPLE_CHARS.min(max_message_chars);
        let mut examples = Vec::with_capacity(list.len());
        for (i, question) in list.iter().enumerate() {
            let question = question.trim();
            let chars = question.chars().count();
            if !(1..=most).contains(&chars) || question.chars().any(char::is_control) {
                return Err(bad(format!(
                    "question {i} must be 1 to {most} characters without control characters"
                )));
            }
            examples.push(question.to_owned());
        }
        Ok(Self(examples))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<ContextOptions, String> {
        ContextOptions::parse(raw, 200).map_err(|e| {
            assert_eq!(e.var, "PAGE_CONTEXT_OPTIONS");
            e.problem
        })
    }

    #[test]
    fn a_stream_url_is_an_http_base_url_and_its_origin_joins_the_policy() {
        let url = StreamUrl::parse("https://abc123.lambda-url.eu-west-1.on.aws/").unwrap();
        assert_eq!(url.origin(), "https://abc123.lambda-url.eu-west-1.on.aws");
        assert!(
            content_security_policy(Some(&url), None)
                .contains("connect-src 'self' https://abc123.lambda-url.eu-west-1.on.aws;")
        );
        assert!(content_security_policy(None, None).contains("connect-src 'self';"));
        let token = url::Url::parse("https://auth.example.org/oauth2/token").unwrap();
        assert!(content_security_policy(Some(&url), Some(&token)).contains(
            "connect-src 'self' https://abc123.lambda-url.eu-west-1.on.aws \
                 https://auth.example.org;"
        ));
        for bad in [
            "abc.lambda-url.on.aws/",
            "ftp://host/",
            "https://host/chat",
            "https://host/?x=1",
            "https://user:pw@host/",
            "javascript:alert(1)",
        ] {
            let e = StreamUrl::parse(bad).unwrap_err();
            assert_eq!(e.var, "PAGE_STREAM_URL", "{bad}");
        }
    }

    #[test]
    fn options_are_read_into_labels_and_context_objects() {
        let options = parse(
            r#"{"label": " District ", "options": [
                {"label": "Leeds", "context": {"district": {"code": "E08000035", "label": "Leeds"}}},
                {"label": "York", "context": {"district": "York"}}]}"#,
        )
        .unwrap();
        assert_eq!(options.label, "District");
        assert_eq!(options.options.len(), 2);
        assert_eq!(
            Value::Object(options.options[0].context.clone()),
            json!({"district": {"code": "E08000035", "label": "Leeds"}})
        );
        // What `/api/page` sends is the setting's own shape.
        assert_eq!(
            serde_json::to_value(&options).unwrap()["options"][1],
            json!({"label": "York", "context": {"district": "York"}})
        );
    }

    #[test]
    fn malformed_options_stop_start_up_saying_where() {
        for (raw, says) in [
            ("[1]", "must be JSON"),
            (r#"{"label": "D"}"#, "missing field `options`"),
            (
                r#"{"label": "D", "options": [], "x": 1}"#,
                "unknown field `x`",
            ),
            (
                r#"{"label": "D", "options": [{"label": "A", "context": [1]}]}"#,
                "at `options[0].context`",
            ),
            (r#"{"label": "D", "options": []}"#, "1 to 500 choices"),
            (
                r#"{"label": "", "options": [{"label": "A", "context": {"a": 1}}]}"#,
                "`label` must be",
            ),
            (
                r#"{"label": "D", "options": [{"label": "A\nB", "context": {"a": 1}}]}"#,
                "`options[0].label` must be",
            ),
            (
                r#"{"label": "D", "options": [{"label": "A", "context": {"a": 1}},
                    {"label": "A", "context": {"a": 2}}]}"#,
                "`options[1].label` \"A\" is used twice",
            ),
            (
                r#"{"label": "D", "options": [{"label": "A", "context": {}}]}"#,
                "`options[0].context` is empty",
            ),
            (
                r#"{"label": "D", "options": [{"label": "A", "context": {"a": "\u0000"}}]}"#,
                "NUL",
            ),
            (
                r#"{"label": "D", "options": [{"label": "A", "context": {"a": 1}}]} x"#,
                "trailing characters",
            ),
        ] {
            let problem = parse(raw).unwrap_err();
            assert!(problem.contains(says), "{raw}: {problem}");
        }
        let big = format!(
            r#"{{"label": "D", "options": [{{"label": "A", "context": {{"a": "{}"}}}}]}}"#,
            "x".repeat(300)
        );
        let problem = parse(&big).unwrap_err();
        assert!(problem.contains("MAX_CONTEXT_BYTES (200)"), "{problem}");
    }

    #[test]
    fn examples_are_a_short_list_of_short_questions() {
        let examples = Examples::parse(
            r#"[" Which districts are in Kent? ", "What is due?"]"#,
            4000,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&examples).unwrap(),
            json!(["Which districts are in Kent?", "What is due?"])
        );
        for (raw, max, says) in [
            ("{}", 4000, "must be a JSON list"),
            ("[1]", 4000, "must be a JSON list"),
            ("[]", 4000, "1 to 12 questions"),
            (
                &*format!("[{}]", vec!["\"q\""; 13].join(",")),
                4000,
                "1 to 12 questions",
            ),
            (r#"[" "]"#, 4000, "question 0 must be 1 to 200"),
            (r#"["a", "b\nc"]"#, 4000, "question 1"),
            (&*format!(r#"["{}"]"#, "x".repeat(201)), 4000, "1 to 200"),
            (r#"["a question"]"#, 5, "1 to 5 characters"),
        ] {
            let e = Examples::parse(raw, max).unwrap_err();
            assert_eq!(e.var, "PAGE_EXAMPLES");
            assert!(e.problem.contains(says), "{raw}: {}", e.problem);
        }
    }

    /// The relative specifiers a module imports (`import ... from "./x.js"`, `import "./x.js"`).
    fn imports(module: &str) -> Vec<&str> {
        let mut found = Vec::new();
        for opener in ["from \"", "import \""] {
            for (at, _) in module.match_indices(opener) {
                let rest = &module[at + opener.len()..];
                found.push(&rest[..rest.find('"').unwrap_or(rest.len())]);
            }
        }
        found
    }

    #[test]
    fn every_file_of_the_page_is_served() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("page");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .map(|name| match name.as_str() {
                "index.html" => "/".to_owned(),
                _ => format!("/assets/{name}"),
            })
            .collect();
        on_disk.sort();
        let mut served: Vec<String> = FILES.iter().map(|f| f.0.to_owned()).collect();
        served.sort();
        assert_eq!(
            on_disk, served,
            "a file in page/ not in FILES, or the other way round"
        );
        for &(path, _, content_type) in FILES {
            if path.ends_with(".js") {
                assert_eq!(content_type, JS, "{path}");
            }
        }
    }

    #[test]
    fn modules_import_only_the_modules_below_them() {
        let modules: Vec<(&str, &str)> = FILES
            .iter()
            .filter(|f| f.0.ends_with(".js"))
            .map(|f| (f.0.trim_start_matches("/assets/"), f.1))
            .collect();
        assert_eq!(modules[0].0, "app.js", "the entry module comes first");
        for (i, (name, body)) in modules.iter().enumerate() {
            assert!(!body.contains("import("), "{name} imports at run time");
            for specifier in imports(body) {
                let target = specifier.strip_prefix("./").unwrap_or_else(|| {
                    panic!("{name} imports {specifier:?}: only the page's own modules, as ./<file>")
                });
                let below = modules[i + 1..].iter().any(|(other, _)| *other == target);
                assert!(
                    below,
                    "{name} imports {target}, which is not listed below it in FILES"
                );
            }
        }
    }

    #[test]
    fn etags_follow_the_content() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }
}
