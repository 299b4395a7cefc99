//! A collection's settings object, `<collection>/_collection.json`: its title, description,
//! whether every caller may read it, and who else may. Parsed strictly, so a misspelt key is
//! reported rather than silently ignored.

use serde::Deserialize;

use crate::Member;

/// The most a settings object may hold; anything larger is a mistake.
pub const MAX_SETTINGS_BYTES: usize = 64 * 1024;

/// What a settings object says; a field left out keeps what the collection has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectionSettings {
    pub title: Option<String>,
    pub description: Option<String>,
    pub public: Option<bool>,
    /// When given, the whole list of the collection's members (users and groups).
    pub readers: Option<Vec<Member>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    title: Option<String>,
    description: Option<String>,
    public: Option<bool>,
    readers: Option<RawReaders>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReaders {
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
}

impl CollectionSettings {
    /// Parses the object's bytes, or says what is wrong with them.
    pub fn parse(bytes: &[u8]) -> Result<CollectionSettings, String> {
        if bytes.len() > MAX_SETTINGS_BYTES {
            return Err(format!(
                "the settings object is {} bytes, over the limit of {MAX_SETTINGS_BYTES}",
                bytes.len()
            ));
        }
        let raw: Raw = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "the settings object is not valid: {e} (keys: title, description, public, readers {{users, groups}})"
            )
        })?;
        let blank = |s: &String| s.trim().is_empty();
        if raw.title.as_ref().is_some_and(blank) {
            return Err("the settings object's title is empty".into());
        }
        let readers = match raw.readers {
            None => None,
            Some(r) => {
                if r.users.iter().chain(&r.groups).any(blank) {
                    return Err("the settings object names an empty user or group".into());
                }
                Some(
                    r.users
                        .into_iter()
                        .map(Member::User)
                        .chain(r.groups.into_iter().map(Member::Group))
                        .collect(),
                )
            }
        };
        Ok(CollectionSettings {
            title: raw.title,
            description: raw.description,
            public: raw.public,
            readers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_read_and_readers_become_members() {
        let s = CollectionSettings::parse(
            br#"{"title": "HR policies", "description": "Leave, pay", "public": false,
                 "readers": {"groups": ["hr"], "users": ["auth0|42"]}}"#,
        )
        .unwrap();
        assert_eq!(s.title.as_deref(), Some("HR policies"));
        assert_eq!(s.public, Some(false));
        assert_eq!(
            s.readers,
            Some(vec![
                Member::User("auth0|42".into()),
                Member::Group("hr".into())
            ])
        );
        assert_eq!(
            CollectionSettings::parse(b"{}").unwrap(),
            CollectionSettings::default()
        );
    }

    #[test]
    fn a_misspelt_key_or_bad_json_is_reported_with_the_keys_there_are() {
        let e = CollectionSettings::parse(br#"{"titel": "x"}"#).unwrap_err();
        assert!(e.contains("titel") && e.contains("keys: title"), "{e}");
        let e = CollectionSettings::parse(b"{not json").unwrap_err();
        assert!(e.contains("not valid"), "{e}");
        let e = CollectionSettings::parse(br#"{"readers": {"groups": [" "]}}"#).unwrap_err();
        assert!(e.contains("empty user or group"), "{e}");
    }
}
