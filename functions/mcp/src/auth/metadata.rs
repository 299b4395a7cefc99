//! OAuth 2.0 Protected Resource Metadata (RFC 9728), served only when user tokens are
//! configured: tells an MCP client (the Inspector, an SDK, a desktop assistant) which
//! authorization server issues the tokens `/mcp` accepts, as the MCP authorization spec asks.
//! It is public and static: built once from the settings, never from a request.

use axum::Router;
use axum::routing::get;
use serde_json::{Value, json};

use crate::config::UserTokens;

/// The well-known prefix of RFC 9728 §3.
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// Where the document for `resource` lives (RFC 9728 §3.1): the well-known prefix goes between
/// the host and the resource's path, so `https://h/mcp` gives
/// `https://h/.well-known/oauth-protected-resource/mcp`.
pub fn document_url(resource: &url::Url) -> String {
    let mut url = resource.clone();
    url.set_path(&document_path(resource));
    url.into()
}

fn document_path(resource: &url::Url) -> String {
    format!("{WELL_KNOWN}{}", resource.path().trim_end_matches('/'))
}

/// The document: `resource`, `authorization_servers` (the issuer, when `JWT_ISSUER` is set) and
/// `bearer_methods_supported` (the `Authorization` header only).
pub fn document(users: &UserTokens) -> Value {
    let mut document = json!({
        "resource": users.resource.as_str(),
        "bearer_methods_supported": ["header"],
    });
    if let Some(issuer) = &users.jwt.issuer {
        document["authorization_servers"] = json!([issuer]);
    }
    document
}

/// `GET` routes for the document: at the well-known prefix alone, suffixed with `/mcp` (where
/// MCP clients look first for an endpoint at `/mcp`), and suffixed with the path of
/// `MCP_RESOURCE_URL` when that is another one.
pub fn routes(users: &UserTokens) -> Router {
    let body = axum::Json(document(users));
    let mut paths = vec![WELL_KNOWN.to_owned(), format!("{WELL_KNOWN}/mcp")];
    let own = document_path(&users.resource);
    if !paths.contains(&own) {
        paths.push(own);
    }
    paths.into_iter().fold(Router::new(), |router, path| {
        let body = body.clone();
        router.route(&path, get(move || async move { body }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn the_document_url_puts_the_well_known_prefix_before_the_path() {
        assert_eq!(
            document_url(&url("https://api.example/mcp")),
            "https://api.example/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            document_url(&url("http://127.0.0.1:3001/prod/mcp/")),
            "http://127.0.0.1:3001/.well-known/oauth-protected-resource/prod/mcp"
        );
        assert_eq!(
            document_url(&url("https://api.example")),
            "https://api.example/.well-known/oauth-protected-resource"
        );
    }
}
