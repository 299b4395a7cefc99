//! How an error becomes one line of text for a log or a terminal: the error and its causes.
//!
//! Many libraries (reqwest, hyper, the AWS SDK) put the useful part ("Connection refused") in
//! the source chain and only a wrapper's words in `Display`; this is the one place that walks it.

use std::error::Error;

/// `error: cause: cause's cause`, each piece once: wrappers often repeat their cause's text.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let piece = cause.to_string();
        if !piece.is_empty() && !text.contains(&piece) {
            text.push_str(": ");
            text.push_str(&piece);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("error sending request")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("client error (Connect): tcp connect error")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn causes_follow_the_error_once_each() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "tcp connect error");
        assert_eq!(
            chain(&Outer(Middle(io))),
            "error sending request: client error (Connect): tcp connect error"
        );
    }
}
