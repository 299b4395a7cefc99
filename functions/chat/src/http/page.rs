//! The chat page for people: `GET /` and its assets (a stylesheet and the ES modules of its
//! script, listed in [`FILES`], [`PAGE_SCRIPT`], those modules as the one script the page
//! loads, and the classic scripts of [`LIBRARIES`], loaded when first needed), compiled into the binary from `page/` (no files on disk, no build step, no server of
//! its own, no request leaves for another host), and `GET /api/page`, what the page must know
//! before its first API call.
//!
//! Nothing here reads a token: the page is the same for everyone, and what `/api/page` tells
//! (the assistant's name, whether to ask for a token or how to sign in, the picker's options,
//! the example questions) is settings, not data. The page itself then calls the API with the caller's token like any other client.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use axum::Router;
use axum::http::StatusCode;
use axum::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use bytes::Bytes;
use parley_core::config::{ConfigError, Env};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::sign_in::{Discovery, SignInInfo};
use crate::auth::AuthMode;

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

/// The routes: `GET /`, each asset of [`FILES`] and the page's script (HEAD too), and
/// `GET /api/page`.
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
        for (path, body, content_type) in served() {
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
    for (path, body, content_type) in served() {
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
            include_str!(concat!("../../page/", $file)),
            $content_type,
        )
    };
}

/// The page's files: (path, body, content type). A new module of the page is one `asset!` line
/// here, and a module imports only those listed below it (app.js's header says what each is for;
/// `modules_import_only_the_modules_below_them` keeps the order true). Assets stay flat under
/// `/assets/`: template.yaml's HTTP API routes `GET /assets/{asset}`, one path segment.
const FILES: &[(&str, &str, &str)] = &[
    ("/", include_str!("../../page/index.html"), HTML),
    asset!("app.css", CSS),
    asset!("app.js", JS),
    asset!("sign-in.js", JS),
    asset!("composer.js", JS),
    asset!("approvals.js", JS),
    asset!("turn.js", JS),
    asset!("conversations.js", JS),
    asset!("context.js", JS),
    asset!("usage.js", JS),
    asset!("reply.js", JS),
    asset!("approval-card.js", JS),
    asset!("chart.js", JS),
    asset!("table.js", JS),
    asset!("feedback.js", JS),
    asset!("http.js", JS),
    asset!("session.js", JS),
    asset!("problems.js", JS),
    asset!("busy.js", JS),
    asset!("stream.js", JS),
    asset!("markdown.js", JS),
    asset!("state.js", JS),
    asset!("dom.js", JS),
];

/// Classic scripts (not ES modules: never bundled) the page adds with a `<script src>` element
/// when it first needs them, so a page that never draws a chart never loads them.
/// `charts-lib.js` is vega, vega-lite, vega-embed and vega-interpreter from npm (850 kB, 7
/// times the page's own script), written by `scripts/vendor-charts` from the versions pinned in
/// `functions/chat/vendor/`: committed, so building the chat needs no npm.
const LIBRARIES: &[(&str, &str, &str)] = &[asset!("charts-lib.js", JS)];

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
/// What browsers require of a module script (they refuse one served as anything else).
const JS: &str = "text/javascript; charset=utf-8";

/// Where the page's script is served: flat under `/assets/`, like every asset.
const PAGE_SCRIPT_PATH: &str = "/assets/page.js";

/// The one script `index.html` loads: the ES modules of [`FILES`] bundled by [`bundle`], built
/// once per process (the router asks for it at start-up). Deployed, each asset request is a
/// Lambda invocation and the chat's reserved concurrency is 5 (demo) to 25 (team): the page's
/// 18 modules, fetched and revalidated at once on every load, were throttled. The modules stay
/// the source, one concern each, and are still served, for tests and people debugging.
static PAGE_SCRIPT: LazyLock<String> = LazyLock::new(|| {
    bundle(&modules_bottom_up()).unwrap_or_else(|refusals| {
        // The modules are compiled in, and `the_page_script_bundles_every_module_once_in_order`
        // bundles the same text: a binary that gets here never passed its tests.
        let refusals: Vec<String> = refusals.iter().map(Refusal::to_string).collect();
        panic!("the page's modules do not bundle:\n{}", refusals.join("\n"))
    })
});

/// Every file served, as (path, body, content type): [`FILES`], [`LIBRARIES`], then the
/// page's script.
fn served() -> impl Iterator<Item = (&'static str, &'static str, &'static str)> {
    let script: &'static str = PAGE_SCRIPT.as_str();
    FILES
        .iter()
        .chain(LIBRARIES)
        .copied()
        .chain([(PAGE_SCRIPT_PATH, script, JS)])
}

/// The page's ES modules as (file, text), each after the modules it imports: [`FILES`] lists
/// each above those it imports, so this is [`FILES`] read bottom-up.
fn modules_bottom_up() -> Vec<(&'static str, &'static str)> {
    FILES
        .iter()
        .rev()
        .filter_map(|&(path, body, _)| {
            let file = path.strip_prefix("/assets/")?;
            file.ends_with(".js").then_some((file, body))
        })
        .collect()
}

/// Something in a module [`bundle`] cannot keep equivalent, and where.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    file: String,
    /// 1-based, as an editor counts.
    line: usize,
    why: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.why)
    }
}

/// `modules` (file, text), each after the modules it imports, as one module script. A browser
/// links ES modules and evaluates each after its imports, every module with its own scope; here
/// they are concatenated in that order into one scope, each without its
/// `import { a, b } from "./x.js";` statements (the names are then in scope already) and with
/// `export` dropped before its declarations. That runs as the modules did as long as nothing
/// needs a module of its own, so anything else is refused: other kinds of import and export, a
/// dynamic `import(`, an import of a name the module named does not export, and a top-level name
/// declared in two modules (a second `function` would silently replace the first). Top-level
/// declarations are read from lines at column 0, one name each (no destructuring), which is how
/// the page's modules are written. Each module starts with a `// --- <file> ---` line and keeps
/// its lines where they were (a dropped import leaves blank lines): line n of a module is the
/// n-th line after its marker, so a stack trace points at the source. No parser, on purpose: a
/// few line rules the page's code keeps, checked by the tests below.
fn bundle(modules: &[(&str, &str)]) -> Result<String, Vec<Refusal>> {
    let mut script = String::new();
    let mut refusals = Vec::new();
    // Each top-level name: the module declaring it, and whether that module exports it.
    let mut declared: HashMap<String, (String, bool)> = HashMap::new();
    for (i, &(file, text)) in modules.iter().enumerate() {
        let evaluated_before = &modules[..i];
        let mut refuse = |line: usize, why: String| {
            refusals.push(Refusal {
                file: file.to_owned(),
                line,
                why,
            });
        };
        script.push_str(&format!("// --- {file} ---\n"));
        // An import statement read so far: its first line and its text.
        let mut import: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            let n = n + 1;
            if line.contains("import(") {
                refuse(
                    n,
                    "a dynamic `import(`: it would load a second copy of a module".into(),
                );
            }
            let statement = match import.take() {
                Some((start, so_far)) => Some((start, format!("{so_far} {}", line.trim()))),
                None if import_statement_starts(line) => Some((n, line.to_owned())),
                None => None,
            };
            if let Some((start, statement)) = statement {
                script.push('\n');
                match import_statement(&statement) {
                    None => import = Some((start, statement)),
                    Some(Err(why)) => refuse(start, why),
                    Some(Ok((target, names))) => {
                        if !evaluated_before.iter().any(|(other, _)| *other == target) {
                            refuse(
                                start,
                                format!(
                                    "imports {target}, which is not a module evaluated before it (listed below it in FILES)"
                                ),
                            );
                        }
                        for name in names {
                            if declared.get(name) != Some(&(target.to_owned(), true)) {
                                refuse(
                                    start,
                                    format!("imports `{name}`, which {target} does not export"),
                                );
                            }
                        }
                    }
                }
                continue;
            }
            let code = line.trim_start();
            if code.len() != line.len()
                && (import_statement_starts(code) || starts_with_word(code, "export").is_some())
            {
                refuse(n, "an import or export not at column 0".into());
            }
            let (line, exported) = match starts_with_word(line, "export") {
                None => (line, false),
                Some(rest) => match export_declaration(rest) {
                    Ok(declaration) => (declaration, true),
                    Err(why) => {
                        refuse(n, why.into());
                        (line, false)
                    }
                },
            };
            match top_level_name(line) {
                None => {}
                Some(Err(why)) => refuse(n, why.into()),
                Some(Ok(name)) => match declared.get(name) {
                    Some((other, _)) => refuse(
                        n,
                        format!(
                            "declares `{name}` at the top level, as {other} does: in one script one would replace or clash with the other"
                        ),
                    ),
                    None => {
                        declared.insert(name.to_owned(), (file.to_owned(), exported));
                    }
                },
            }
            script.push_str(line);
            script.push('\n');
        }
        if let Some((start, _)) = import {
            refuse(start, "an import statement without an end".into());
        }
    }
    if refusals.is_empty() {
        Ok(script)
    } else {
        Err(refusals)
    }
}

/// `text` after `word`, when it starts with that word (not just with its letters).
fn starts_with_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let rest = text.strip_prefix(word)?;
    (!rest.starts_with(is_name_char)).then_some(rest)
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$'
}

/// Whether `line` starts a static import statement (`import.meta` and `import(` do not).
fn import_statement_starts(line: &str) -> bool {
    starts_with_word(line, "import")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_whitespace() || "{*\"'".contains(c)))
}

/// An import statement read so far: `None` until its specifier's closing quote, then the file
/// and names of `import { a, b } from "./x.js";` (none for `import "./x.js";`), or why the bundle
/// cannot keep it.
fn import_statement(statement: &str) -> Option<Result<(&str, Vec<&str>), String>> {
    let body = starts_with_word(statement.trim_start(), "import")?;
    let open = body.find(['"', '\''])?;
    let quote = &body[open..=open];
    let close = open + 1 + body[open + 1..].find(quote)?;
    let (head, specifier) = (body[..open].trim(), &body[open + 1..close]);
    if !matches!(body[close + 1..].trim(), "" | ";") {
        return Some(Err("code after an import statement on its line".into()));
    }
    let names = if head.is_empty() {
        Vec::new()
    } else if head.starts_with('*') {
        return Some(Err("`import * as`: no module object in one script".into()));
    } else if let Some(list) = head.strip_prefix('{') {
        let Some((list, rest)) = list.split_once('}') else {
            return Some(Err("an import list without its `}`".into()));
        };
        if rest.trim() != "from" {
            return Some(Err(format!(
                "an import statement of a kind the bundle cannot read: {statement}"
            )));
        }
        let names: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        if let Some(renamed) = names.iter().find(|n| !n.chars().all(is_name_char)) {
            return Some(Err(format!(
                "a renaming import (`{renamed}`): one name per thing in one script"
            )));
        }
        names
    } else {
        return Some(Err("a default import (`import x from`)".into()));
    };
    let Some(target) = specifier.strip_prefix("./") else {
        return Some(Err(format!(
            "imports {specifier:?}: only the page's own modules, as ./<file>"
        )));
    };
    Some(Ok((target, names)))
}

/// The declaration after `export` (`export function f` gives `function f`), or why the bundle
/// cannot keep the export.
fn export_declaration(rest: &str) -> Result<&str, &'static str> {
    let declaration = rest.trim_start();
    if starts_with_word(declaration, "default").is_some() {
        Err("`export default`: no module to be the default of in one script")
    } else if declaration.starts_with('{') {
        Err("an `export { ... }` list: export each declaration where it is made")
    } else if declaration.starts_with('*') {
        Err("`export *`: no module to re-export in one script")
    } else if rest.starts_with(' ') && top_level_name(declaration).is_some() {
        Ok(declaration)
    } else {
        Err(
            "an export of a kind the bundle cannot read: `export` a function, class, const, let or var",
        )
    }
}

/// What a line at column 0 declares at the top level (`function f`, `async function* g`,
/// `class C`, `const x`, `let x`, `var x`): `None` when it declares nothing, else the name or
/// why the bundle cannot tell the names apart.
fn top_level_name(line: &str) -> Option<Result<&str, &'static str>> {
    let function = starts_with_word(line, "async")
        .and_then(|rest| starts_with_word(rest.trim_start(), "function"))
        .or_else(|| starts_with_word(line, "function"))
        .map(|rest| rest.trim_start().trim_start_matches('*'));
    let rest = function.or_else(|| {
        ["class", "const", "let", "var"]
            .iter()
            .find_map(|keyword| starts_with_word(line, keyword))
    })?;
    let rest = rest.trim_start();
    let (name, after) = rest.split_at(rest.find(|c| !is_name_char(c)).unwrap_or(rest.len()));
    if name.is_empty() {
        return Some(Err(if rest.starts_with(['{', '[']) {
            "a destructuring declaration at the top level: declare each name on its own"
        } else {
            "a top-level declaration whose name is not on its first line"
        }));
    }
    if after.trim_start().starts_with(',') {
        return Some(Err(
            "a top-level declaration of several names: one per statement",
        ));
    }
    Some(Ok(name))
}

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
        let mut served: Vec<String> = FILES
            .iter()
            .chain(LIBRARIES)
            .map(|f| f.0.to_owned())
            .collect();
        served.sort();
        assert_eq!(
            on_disk, served,
            "a file in page/ not in FILES or LIBRARIES, or the other way round"
        );
        for &(path, _, content_type) in FILES.iter().chain(LIBRARIES) {
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

    /// What `bundle` says about `modules`, one "file:line: why" each.
    fn refusals(modules: &[(&str, &str)]) -> Vec<String> {
        match bundle(modules) {
            Ok(script) => panic!("bundled:\n{script}"),
            Err(refusals) => refusals.iter().map(Refusal::to_string).collect(),
        }
    }

    #[test]
    fn the_page_script_bundles_every_module_once_in_order() {
        let modules = modules_bottom_up();
        let script = bundle(&modules).unwrap_or_else(|refusals| {
            let refusals: Vec<String> = refusals.iter().map(Refusal::to_string).collect();
            panic!("{}", refusals.join("\n"))
        });
        assert_eq!(script, *PAGE_SCRIPT);
        let files: Vec<&str> = modules.iter().map(|m| m.0).collect();
        let js = FILES.iter().filter(|f| f.0.ends_with(".js")).count();
        assert_eq!(files.len(), js);
        assert_eq!(files.last(), Some(&"app.js"), "the entry module runs last");
        let markers: Vec<&str> = script
            .lines()
            .filter_map(|l| l.strip_prefix("// --- ")?.strip_suffix(" ---"))
            .collect();
        assert_eq!(markers, files, "each module once, each after its imports");
        // Each module's lines where they were: imports blank, `export ` dropped, nothing else.
        for (file, text) in &modules {
            let marker = format!("// --- {file} ---\n");
            let start = script.find(&marker).unwrap() + marker.len();
            let bundled = script[start..].lines();
            for (n, (source, kept)) in text.lines().zip(bundled).enumerate() {
                let dropped_import = kept.is_empty()
                    && (source.starts_with("import ") || source.trim_start().starts_with("from "));
                assert!(
                    dropped_import || kept == source.strip_prefix("export ").unwrap_or(source),
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

    #[test]
    fn the_chart_library_is_a_classic_script_served_outside_the_bundle() {
        let [(path, lib, content_type)] = LIBRARIES else {
            panic!("one library: {LIBRARIES:?}")
        };
        assert_eq!((*path, *content_type), ("/assets/charts-lib.js", JS));
        // A classic script: an `import` or `export` statement would be a syntax error in it.
        for line in lib.lines() {
            assert!(
                !line.starts_with("import ") && !line.starts_with("export "),
                "{line}"
            );
        }
        // The globals chart.js uses, set by the UMD builds and the rewritten interpreter.
        for global in [
            ").vega={}",
            ").vegaLite={}",
            ").vegaEmbed=",
            "globalThis.vegaInterpreter = ",
        ] {
            assert!(lib.contains(global), "charts-lib.js sets no {global}");
        }
        assert!(
            !PAGE_SCRIPT.contains("vegaInterpreter = "),
            "bundled into page.js"
        );
        assert!(served().any(|(p, body, _)| p == *path && body.len() == lib.len()));
    }

    #[test]
    fn a_module_keeps_its_lines_under_its_marker_without_imports_or_exports() {
        let script = bundle(&[
            (
                "dom.js",
                "export const $ = (id) => id;\nexport async function* parts() {}\n",
            ),
            (
                "app.js",
                "import {\n  $,\n  parts,\n} from \"./dom.js\";\nimport \"./dom.js\";\n\
                 export class App {}\nconst base = import.meta.url; // $(1)\n",
            ),
        ])
        .unwrap();
        assert_eq!(
            script,
            "// --- dom.js ---\nconst $ = (id) => id;\nasync function* parts() {}\n\
             // --- app.js ---\n\n\n\n\n\nclass App {}\nconst base = import.meta.url; // $(1)\n"
        );
    }

    #[test]
    fn what_one_script_cannot_keep_equivalent_is_refused_naming_file_and_line() {
        let dom = (
            "dom.js",
            "export const $ = (id) => id;\nexport function el() {}\nfunction own() {}\n",
        );
        for (module, says) in [
            (
                "import * as dom from \"./dom.js\";",
                "a.js:1: `import * as`",
            ),
            (
                "// x\nimport dom from \"./dom.js\";",
                "a.js:2: a default import",
            ),
            (
                "import { $, el as make } from \"./dom.js\";",
                "a.js:1: a renaming import",
            ),
            (
                "// x\nexport default function f() {}",
                "a.js:2: `export default`",
            ),
            (
                "const a = 1;\nexport { a };",
                "a.js:2: an `export { ... }` list",
            ),
            ("export * from \"./dom.js\";", "a.js:1: `export *`"),
            (
                "f();\nasync function f() {\n  await import(\"./dom.js\");\n}",
                "a.js:3: a dynamic `import(`",
            ),
            (
                "\nfunction el() {}",
                "a.js:2: declares `el` at the top level, as dom.js does",
            ),
            (
                "let own = 1;",
                "a.js:1: declares `own` at the top level, as dom.js does",
            ),
            (
                "const { a, b } = {};",
                "a.js:1: a destructuring declaration",
            ),
            (
                "export const [a] = [1];",
                "a.js:1: a destructuring declaration",
            ),
            (
                "let a, b;",
                "a.js:1: a top-level declaration of several names",
            ),
            (
                "import { own } from \"./dom.js\";",
                "a.js:1: imports `own`, which dom.js does not export",
            ),
            (
                "import { x } from \"./later.js\";",
                "a.js:1: imports later.js, which is not a module evaluated before it",
            ),
            (
                "import { el } from \"/dom.js\";",
                "a.js:1: imports \"/dom.js\": only the page's own modules",
            ),
            (
                "{\n  import { el } from \"./dom.js\";\n}",
                "a.js:2: an import or export not at column 0",
            ),
            (
                "import {\n  el\n} from \"./dom.js\"; el();",
                "a.js:1: code after an import statement",
            ),
            (
                "const a = 1;\nimport { el }",
                "a.js:2: an import statement without an end",
            ),
        ] {
            let refused = refusals(&[dom, ("a.js", module)]);
            assert!(
                refused.iter().any(|r| r.starts_with(says)),
                "{module}: {refused:?}"
            );
        }
    }

    #[test]
    fn etags_follow_the_content() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
    }
}
