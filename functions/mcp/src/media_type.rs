//! What `/mcp` counts as a JSON body: the one media-type test both the direct path (which only
//! takes JSON) and the transport-error middleware (which tells a bad body from a wrong type)
//! apply, so the two cannot disagree.

/// `Content-Type` names JSON, parameters aside (rmcp's own test; `application/jsonx` is not).
pub fn is_json_media_type(value: &str) -> bool {
    let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
    essence.trim().eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_and_case_aside_only_application_json_is_json() {
        assert!(is_json_media_type("application/json"));
        assert!(is_json_media_type("Application/JSON; charset=utf-8"));
        assert!(!is_json_media_type("application/jsonx"));
        assert!(!is_json_media_type("text/plain"));
    }
}
