//! Test-only signing keys for the JWT tests of `parley-core` and the chat function, and the JSON
//! Web Key Set of their public halves (`fixtures/README.md` says how they were made). Public:
//! never trust anything signed by them outside tests.

/// RSA 2048 private key (PKCS#8); in [`JWKS`] as kid `test-rsa` (RS256).
pub const RSA_PEM: &[u8] = include_bytes!("../fixtures/rsa.pem");
/// An RSA key that is not in [`JWKS`], for forged signatures.
pub const RSA_OTHER_PEM: &[u8] = include_bytes!("../fixtures/rsa-other.pem");
/// P-256 private key (PKCS#8); in [`JWKS`] as kid `test-ec` (ES256).
pub const EC_PEM: &[u8] = include_bytes!("../fixtures/ec-p256.pem");
/// A P-256 key that is not in [`JWKS`], for forged signatures.
pub const EC_OTHER_PEM: &[u8] = include_bytes!("../fixtures/ec-p256-other.pem");
/// Ed25519 private key (PKCS#8); in [`JWKS`] as kid `test-ed` (EdDSA).
pub const ED25519_PEM: &[u8] = include_bytes!("../fixtures/ed25519.pem");
/// An Ed25519 key that is not in [`JWKS`], for forged signatures.
pub const ED25519_OTHER_PEM: &[u8] = include_bytes!("../fixtures/ed25519-other.pem");
/// The public halves of [`RSA_PEM`], [`EC_PEM`] and [`ED25519_PEM`] as a JSON Web Key Set.
pub const JWKS: &str = include_str!("../fixtures/jwks.json");
