//! The page checks: `GET` the page, each script and stylesheet it references and its config
//! (`api/page`), as a browser opening it does; then, when the config says the page signs
//! people in, the provider's discovery document, fetched here and as the chat saw it.

use reqwest::header;
use serde_json::Value;

use super::http::{Answer, Probe};
use super::{Check, Outcome, Seen};

/// What the page learns from `GET api/page` that the other checks need.
#[derive(Debug, Clone, PartialEq)]
pub struct PageConfig {
    /// `token` (users present a token) or `none` (`CHAT_AUTH=none`, one local user).
    pub auth: String,
    /// `PAGE_STREAM_URL`: where the page sends its streamed turns, when not its own origin.
    pub stream_url: Option<url::Url>,
    pub sign_in: Option<SignIn>,
}

/// The page's sign-in provider, as `api/page` names it.
#[derive(Debug, Clone, PartialEq)]
pub struct SignIn {
    /// `OIDC_ISSUER`, as set.
    pub issuer: String,
    /// Why the chat could not use the provider's discovery document, when it could not.
    pub unavailable: Option<String>,
}

/// The page, its assets and its config. The config is read even when the page fails, so the
/// checks that need it (sign-in, stream) still run behind a front door that loses an asset.
pub async fn page(probe: &Probe, seen: &mut Seen) -> Outcome {
    let loaded = page_and_assets(probe).await;
    let settings = settings(probe).await;
    if let Ok(config) = &settings {
        seen.config = Some(config.clone());
    }
    let (assets, config) = match (loaded, settings) {
        (Err(failed), _) | (_, Err(failed)) => return failed,
        (Ok(assets), Ok(config)) => (assets, config),
    };
    let signs_in = match (&config.sign_in, config.auth.as_str()) {
        (Some(s), _) => format!("signs in with {}", s.issuer),
        (None, "none") => "serves one local user without sign-in".to_owned(),
        (None, _) => "asks for a token".to_owned(),
    };
    let streams = match &config.stream_url {
        Some(u) => format!("streams through {u}"),
        None => "streams through its own origin".to_owned(),
    };
    Outcome::ok(
        Check::Page,
        format!(
            "{}: the page, its {assets} assets and its settings load, with its \
             Content-Security-Policy; it {signs_in} and {streams}",
            probe.target.page
        ),
    )
}

/// `GET` the page and each asset it references: how many there are, or the failure.
async fn page_and_assets(probe: &Probe) -> Result<usize, Outcome> {
    let url = &probe.target.page;
    let answer = match probe.get(url).await {
        Ok(answer) => answer,
        Err(why) => {
            return Err(Outcome::fail(
                Check::Page,
                format!("nothing answers at {url}: {why}"),
                if probe.is_local() {
                    "Start the local stack with scripts/dev (it serves the chat on \
                     127.0.0.1:3000), or pass the page's URL as URL."
                } else {
                    NOT_THE_PAGE_FIX
                },
            ));
        }
    };
    if answer.status != 200 || answer.media_type() != "text/html" {
        let seen_as = if answer.status == 200 {
            format!("a {} document, not the page", answer.media_type())
        } else {
            answer.summary()
        };
        return Err(Outcome::fail(
            Check::Page,
            format!("GET {url} answered {seen_as}"),
            if answer.status >= 500 {
                FUNCTION_FAILING_FIX
            } else {
                NOT_THE_PAGE_FIX
            },
        ));
    }
    if answer.header(header::CONTENT_SECURITY_POLICY).is_none() {
        return Err(Outcome::fail(
            Check::Page,
            format!("GET {url} answered the page without its Content-Security-Policy header"),
            "Something between the browser and the chat function drops the header (a CDN or \
             proxy in front): let it pass the chat's response headers through, or serve the page \
             straight from the chat function (docs/api.md \"The page: GET /, GET /api/page\").",
        ));
    }
    let html = String::from_utf8_lossy(&answer.body);
    let assets = assets(&html);
    if assets.is_empty() {
        return Err(Outcome::fail(
            Check::Page,
            format!("GET {url} answered an HTML page without Parley's script and stylesheet"),
            NOT_THE_PAGE_FIX,
        ));
    }
    for asset in &assets {
        let Ok(asset_url) = url.join(asset) else {
            return Err(Outcome::fail(
                Check::Page,
                format!("the page references {asset:?}, which is not a URL"),
                FUNCTION_FAILING_FIX,
            ));
        };
        match probe.get(&asset_url).await {
            Ok(a) if a.status == 200 && !a.body.is_empty() => {}
            seen_as => {
                let seen_as = match seen_as {
                    Ok(a) if a.status == 200 => "an empty body".to_owned(),
                    Ok(a) => a.summary(),
                    Err(why) => why,
                };
                return Err(Outcome::fail(
                    Check::Page,
                    format!("GET {asset_url} (the page's {asset}) answered {seen_as}"),
                    format!(
                        "The front door does not pass {asset} on to the chat function, so the page \
                         cannot run: every GET under the page's URL must reach it (template.yaml's \
                         HTTP API routes GET /assets/{{asset}}; a CDN or proxy in front must pass \
                         the page's assets through)."
                    ),
                ));
            }
        }
    }
    Ok(assets.len())
}

/// `GET api/page`, the page's settings, or the failure.
async fn settings(probe: &Probe) -> Result<PageConfig, Outcome> {
    let config_url = probe
        .target
        .page
        .join("api/page")
        .map_err(|e| Outcome::fail(Check::Page, e.to_string(), NOT_THE_PAGE_FIX))?;
    let config = match probe.get(&config_url).await {
        Ok(a) if a.status == 200 => read_config(&a),
        Ok(a) => Err(a.summary()),
        Err(why) => Err(why),
    };
    config.map_err(|why| {
        Outcome::fail(
            Check::Page,
            format!("GET {config_url} (the page's settings) answered {why}"),
            "The page cannot start without its settings: route GET api/page beside the page to \
             the chat function, as template.yaml's HTTP API does (docs/api.md \"The page: GET /, \
             GET /api/page\").",
        )
    })
}

/// What to do when the URL is not the stack's page.
const NOT_THE_PAGE_FIX: &str = "Pass the stack's page URL, the ApiUrl output with its trailing / \
(aws cloudformation describe-stacks --stack-name <stack> --query 'Stacks[0].Outputs'; \
docs/deploy-reference.md \"The two URLs\"), or nothing for scripts/dev's http://127.0.0.1:3000/.";

/// What to do when the chat function answers 5xx.
const FUNCTION_FAILING_FIX: &str = "The chat function is failing: its log names the cause (deployed: \
/aws/lambda/<stack>-chat, and docs/deploy-reference.md \"When something is wrong\"; locally: \
scripts/dev's terminal).";

/// `GET api/page`'s body, or what is wrong with it.
fn read_config(answer: &Answer) -> Result<PageConfig, String> {
    let body = answer
        .json()
        .ok_or_else(|| format!("a body that is not JSON: {}", answer.snippet()))?;
    let auth = body
        .get("auth")
        .and_then(Value::as_str)
        .ok_or("JSON without `auth`: not Parley's page settings")?
        .to_owned();
    let stream_url = match body.get("stream_url").and_then(Value::as_str) {
        None => None,
        Some(raw) => Some(
            url::Url::parse(raw).map_err(|e| format!("a stream_url that is not a URL ({e})"))?,
        ),
    };
    let sign_in = body
        .get("sign_in")
        .filter(|s| !s.is_null())
        .map(|s| {
            Ok::<_, String>(SignIn {
                issuer: s
                    .get("issuer")
                    .and_then(Value::as_str)
                    .ok_or("a sign_in without its issuer")?
                    .to_owned(),
                unavailable: s
                    .get("unavailable")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            })
        })
        .transpose()?;
    Ok(PageConfig {
        auth,
        stream_url,
        sign_in,
    })
}

/// The scripts and stylesheets an HTML page references (`<script src>`, `<link href>`), as
/// written, in order; references to fragments and `data:` are left out. Enough for Parley's
/// page, which a browser would load the same way; not an HTML parser.
pub fn assets(html: &str) -> Vec<String> {
    let lower = html.to_ascii_lowercase();
    let mut found = Vec::new();
    for (tag, attribute) in [("<link", "href"), ("<script", "src")] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(tag) {
            let start = from + at;
            let end = lower[start..].find('>').map_or(lower.len(), |e| start + e);
            if let Some(value) = attribute_value(&html[start..end], &lower[start..end], attribute)
                && !value.is_empty()
                && !value.starts_with('#')
                && !value.to_ascii_lowercase().starts_with("data:")
            {
                found.push((start, value.to_owned()));
            }
            from = end;
        }
    }
    found.sort();
    found.into_iter().map(|(_, v)| v).collect()
}

/// The quoted value of `name=` in a tag's text (`lower` is the same text in lower case).
fn attribute_value<'a>(tag: &'a str, lower: &str, name: &str) -> Option<&'a str> {
    let mut from = 0;
    loop {
        let at = from + lower[from..].find(name)?;
        let before = lower[..at].chars().next_back();
        let rest = lower[at + name.len()..].trim_start();
        from = at + name.len();
        if !before.is_some_and(char::is_whitespace) || !rest.starts_with('=') {
            continue;
        }
        let value_at = tag.len() - rest[1..].trim_start().len();
        let quote = tag[value_at..].chars().next()?;
        if quote != '"' && quote != '\'' {
            let end = tag[value_at..]
                .find(|c: char| c.is_whitespace())
                .map_or(tag.len(), |e| value_at + e);
            return Some(&tag[value_at..end]);
        }
        let end = tag[value_at + 1..].find(quote)? + value_at + 1;
        return Some(&tag[value_at + 1..end]);
    }
}

/// The sign-in provider's discovery document, when the page signs people in.
pub async fn sign_in(probe: &Probe, seen: &Seen) -> Outcome {
    let Some(config) = &seen.config else {
        return Outcome::skip(
            Check::SignIn,
            "the page's settings did not load, so whether it signs in is unknown (see page)",
        );
    };
    let Some(sign_in) = &config.sign_in else {
        return Outcome::skip(
            Check::SignIn,
            if config.auth == "none" {
                "not configured: the chat serves one local user (CHAT_AUTH=none)"
            } else {
                "not configured (no OIDC_ISSUER): the page asks for a token instead"
            },
        );
    };
    let issuer = &sign_in.issuer;
    let document = format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    );
    let fail = |seen_as: String| {
        Outcome::fail(
            Check::SignIn,
            format!("the provider's discovery document {document} {seen_as}"),
            ISSUER_FIX,
        )
    };
    let Ok(document_url) = url::Url::parse(&document) else {
        return fail("is not a URL: OIDC_ISSUER is not one".into());
    };
    let answer = match probe.get(&document_url).await {
        Ok(a) if a.status == 200 => a,
        Ok(a) => return fail(format!("answered {}", a.summary())),
        Err(why) => return fail(format!("could not be fetched: {why}")),
    };
    let Some(body) = answer.json() else {
        return fail(format!("is not JSON: {}", answer.snippet()));
    };
    let field = |name: &str| body.get(name).and_then(Value::as_str);
    let found = field("issuer").unwrap_or_default();
    if found != issuer {
        return Outcome::fail(
            Check::SignIn,
            format!(
                "the provider's discovery document names issuer {found:?}, not OIDC_ISSUER {issuer:?}"
            ),
            format!(
                "Set the chat's OIDC_ISSUER (and JWT_ISSUER, when set) to exactly {found:?}, the \
                 issuer the provider names: tokens carry it (docs/deploy-reference.md \"Another \
                 sign-in provider\")."
            ),
        );
    }
    if let Some(missing) = ["authorization_endpoint", "token_endpoint"]
        .into_iter()
        .find(|f| field(f).is_none_or(|u| url::Url::parse(u).is_err()))
    {
        return fail(format!("has no {missing} URL"));
    }
    if let Some(methods) = body
        .get("code_challenge_methods_supported")
        .and_then(Value::as_array)
        && !methods.iter().any(|m| m == "S256")
    {
        return Outcome::fail(
            Check::SignIn,
            "the provider does not offer PKCE with S256 (code_challenge_methods_supported)",
            "Turn on PKCE (S256) for the page's client at the provider: the page signs in with \
             the authorization code and PKCE (docs/deploy-reference.md \"Another sign-in \
             provider\").",
        );
    }
    if let Some(why) = &sign_in.unavailable {
        return Outcome::fail(
            Check::SignIn,
            format!("the document answers here, but the chat function could not use it: {why}"),
            "The chat function fetches the document itself (JWKS_TIMEOUT_MS): give its subnets a \
             way out to the provider (docs/deploy-reference.md \"The network\", InternetEgress), \
             then start fresh instances (docs/deploy-reference.md \"Secrets after a change\").",
        );
    }
    Outcome::ok(
        Check::SignIn,
        format!("{issuer}: the discovery document names its authorization and token endpoints"),
    )
}

/// What to do when the issuer's discovery document cannot be read.
const ISSUER_FIX: &str = "Set the chat's OIDC_ISSUER to the provider's issuer, whose \
/.well-known/openid-configuration answers (with Cognito the template sets it from the user pool; \
another provider: docs/deploy-reference.md \"Another sign-in provider\").";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parleys_page_references_its_stylesheet_and_script() {
        let html = include_str!("../../../../../functions/chat/page/index.html");
        assert_eq!(assets(html), ["assets/app.css", "assets/page.js"]);
    }

    #[test]
    fn assets_are_read_from_any_quoting_and_fragments_are_not_assets() {
        let html = r##"<LINK rel=stylesheet HREF=/a.css><a href="#top">x</a>
            <script type="module" data-src="no" src='b.js'></script>
            <link rel="icon" href="data:,"><script>inline()</script>"##;
        assert_eq!(assets(html), ["/a.css", "b.js"]);
    }
}
