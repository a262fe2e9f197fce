//! Names JP gives (a lock's conversation id, a session key) as names of
//! objects of the store: one path component that cannot leave the prefix
//! it is put in, whatever JP hands over.

use crate::error::BackendError;

/// The longest name taken (bytes), well below every file system's limit of
/// a component once a suffix is added.
const MAX_NAME: usize = 200;

/// `name` as it is, when it is a safe object name: ASCII letters, digits,
/// `-`, `_` and `.`, not starting with `.`, at most [`MAX_NAME`] bytes.
pub(crate) fn plain(what: &'static str, name: &str) -> Result<String, BackendError> {
    let bad = |reason| BackendError::Name {
        what,
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(bad("empty"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("longer than 200 bytes"));
    }
    if name.starts_with('.') {
        return Err(bad("starts with `.`"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(bad(
            "holds a character other than ASCII letters, digits, `-`, `_` and `.`",
        ));
    }
    Ok(name.to_owned())
}

/// `key`, any text, as an object name: its UTF-8 bytes in lowercase hex
/// (so that any key, `/` and `..` included, names one object of the prefix
/// it is put in, and the name gives the key back).
pub(crate) fn encoded(what: &'static str, key: &str) -> Result<String, BackendError> {
    if key.is_empty() {
        return Err(BackendError::Name {
            what,
            name: String::new(),
            reason: "empty",
        });
    }
    if key.len() * 2 > MAX_NAME {
        return Err(BackendError::Name {
            what,
            name: key.to_owned(),
            reason: "longer than 100 bytes",
        });
    }
    Ok(key.bytes().map(|b| format!("{b:02x}")).collect())
}

/// The key an [`encoded`] name stands for; `None` for a name that is not
/// one.
pub(crate) fn decoded(name: &str) -> Option<String> {
    if name.len() % 2 != 0 || name.is_empty() {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..name.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(name.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_leave_their_prefix_are_refused_or_encoded() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/etc/passwd",
            "a\0b",
            "é",
            ".hidden",
        ] {
            assert!(plain("lock", bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            plain("lock", "jp-c17738400000").expect("plain"),
            "jp-c17738400000"
        );
        for key in ["../../etc/passwd", "a/b", "tty:/dev/pts/3", "é", "\0"] {
            let name = encoded("session", key).expect("encoded");
            assert!(name.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
            assert_eq!(decoded(&name).as_deref(), Some(key));
        }
        assert!(encoded("session", "").is_err());
        assert!(encoded("session", &"x".repeat(101)).is_err());
        assert_eq!(decoded("zz"), None);
        assert_eq!(decoded("abc"), None);
    }
}
