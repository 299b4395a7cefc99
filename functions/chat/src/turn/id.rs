//! The turn's random ids as newtypes, one per kind of thing, so a conversation's id is never
//! passed where an approval's is meant. One macro makes each; each is a UUID v4 (122 random
//! bits), the only handle a client has on what it names.

/// Declares a random id type: `new`, `parse` (any form of UUID, else `None`), `as_uuid`,
/// `Display` as the hyphenated UUID, and serde as that string.
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(uuid::Uuid);

        impl $name {
            pub fn new() -> Self {
                Self(uuid::Uuid::new_v4())
            }

            pub fn parse(raw: &str) -> Option<Self> {
                uuid::Uuid::parse_str(raw).ok().map(Self)
            }

            pub fn as_uuid(&self) -> &uuid::Uuid {
                &self.0
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

pub(crate) use uuid_id;
