//! The user's configuration of stores on S3 (format-spec.md 5.7): the
//! `[s3]` table of the user configuration file, the environment over it,
//! and what the client is made of.
//!
//! A store's own `config.toml` lies inside the store, so it cannot say where
//! the store is: the endpoint, region, credentials, timeouts and the local
//! cache come from the *user* configuration file
//! ([`UserConfig::default_path`]: `$JP_STORE_CONFIG`, else
//! `$XDG_CONFIG_HOME/jp-store/config.toml`, else
//! `~/.config/jp-store/config.toml`), then the environment, which overrides
//! the file key by key ([`S3Config::with_env`]); the command line's flags
//! override both (the caller's business).
//!
//! The file is parsed by serde into typed structures; a key that is not
//! known is an error naming the file and the key, and so is a value of the
//! wrong kind (with what was expected), rather than a setting silently
//! ignored.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use jpstore_blobstore::user_file::{self, LastLink};

/// The variable naming the user configuration file.
pub const CONFIG_VAR: &str = "JP_STORE_CONFIG";
/// The variable of [`S3Config::cache_dir`].
pub const CACHE_DIR_VAR: &str = "JP_STORE_CACHE_DIR";
/// The variable of [`S3Config::cache_size`].
pub const CACHE_SIZE_VAR: &str = "JP_STORE_CACHE_SIZE";

/// What a duration is written as, in errors.
pub(crate) const DURATION: &str =
    "a duration more than 0 such as \"30s\", \"500ms\" or \"2m\" (or a number of seconds)";
/// What a size is written as, in errors.
const SIZE: &str = "a size such as \"512 MiB\", \"2GiB\" or \"100MB\" (or a number of bytes)";

/// The user configuration file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The `[s3]` table: how stores on S3 are reached.
    #[serde(default)]
    pub s3: S3Config,
}

/// The settings of stores on S3: the `[s3]` table of the user configuration
/// file, each key optional (the environment, then the defaults, give what
/// it leaves out).
#[derive(Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// The URL of an S3-compatible server (`AWS_ENDPOINT_URL`); AWS when
    /// unset.
    pub endpoint: Option<String>,
    /// The region (`AWS_REGION`; default `us-east-1`).
    pub region: Option<String>,
    /// Whether a server without TLS (`http://`) may be used
    /// (`AWS_ALLOW_HTTP`).
    pub allow_http: Option<bool>,
    /// The access key (`AWS_ACCESS_KEY_ID`).
    pub access_key_id: Option<String>,
    /// The secret key (`AWS_SECRET_ACCESS_KEY`).
    pub secret_access_key: Option<String>,
    /// The token of temporary credentials (`AWS_SESSION_TOKEN`).
    pub session_token: Option<String>,
    /// The time one request may take before it is abandoned
    /// ([`crate::REQUEST_TIMEOUT_ENV`]; default 30 s).
    #[serde(default, deserialize_with = "duration")]
    pub request_timeout: Option<Duration>,
    /// The longest time spent retrying one request
    /// ([`crate::RETRY_TIMEOUT_ENV`]; default 120 s).
    #[serde(default, deserialize_with = "duration")]
    pub retry_timeout: Option<Duration>,
    /// The directory of the local cache of immutable objects
    /// ([`CACHE_DIR_VAR`]).
    pub cache_dir: Option<PathBuf>,
    /// The bound of the cache of each store, in bytes ([`CACHE_SIZE_VAR`];
    /// default [`crate::DEFAULT_CACHE_BYTES`]).
    #[serde(default, deserialize_with = "size")]
    pub cache_size: Option<u64>,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets are not printed.
        let hidden = |s: &Option<String>| s.as_ref().map(|_| "<hidden>");
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("request_timeout", &self.request_timeout)
            .field("retry_timeout", &self.retry_timeout)
            .field("cache_dir", &self.cache_dir)
            .field("cache_size", &self.cache_size)
            .finish()
    }
}

/// Why the user configuration could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the configuration file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The file is not valid TOML.
    #[error("{}:{line}:{column}: invalid TOML: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What the parser found.
        message: String,
    },
    /// A key the file may not hold.
    #[error("{}:{line}: unknown key `{key}`: {expected}", path.display())]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: usize,
        /// The dotted key (`s3.endpont`).
        key: String,
        /// The keys that are known there.
        expected: String,
    },
    /// A value of the wrong kind.
    #[error("{}:{line}: key `{key}`: {message}", path.display())]
    BadValue {
        /// The file.
        path: PathBuf,
        /// 1-based line of the key.
        line: usize,
        /// The dotted key (`s3.request_timeout`).
        key: String,
        /// What was found, and what was expected.
        message: String,
    },
    /// A variable of the environment holds what its setting cannot be.
    #[error("{var}={found:?}: expected {expected}")]
    BadVariable {
        /// The variable.
        var: &'static str,
        /// What it holds.
        found: String,
        /// What it should hold.
        expected: &'static str,
    },
}

/// The largest user configuration file read: a few settings take a few
/// hundred bytes.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of the configuration file at `path`: a regular file (a link
/// to one is followed) of at most [`MAX_CONFIG_BYTES`], in UTF-8. A FIFO
/// or a device there is refused, not waited on or read without end.
fn read_text(path: &Path) -> io::Result<String> {
    String::from_utf8(user_file::read(path, MAX_CONFIG_BYTES, LastLink::Follow)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

impl UserConfig {
    /// Where the user configuration file is: `$JP_STORE_CONFIG`, else
    /// `$XDG_CONFIG_HOME/jp-store/config.toml`, else
    /// `~/.config/jp-store/config.toml`; with whether it was named by
    /// `$JP_STORE_CONFIG` (then it must exist). `None` without any of
    /// these variables.
    pub fn default_path() -> Option<(PathBuf, bool)> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(p) = var(CONFIG_VAR) {
            return Some((PathBuf::from(p), true));
        }
        let base = match var("XDG_CONFIG_HOME") {
            Some(x) => PathBuf::from(x),
            None => PathBuf::from(var("HOME")?).join(".config"),
        };
        Some((base.join("jp-store").join("config.toml"), false))
    }

    /// The user configuration file of [`UserConfig::default_path`]: an
    /// empty configuration when there is none (unless `$JP_STORE_CONFIG`
    /// names it: then it must be there).
    pub fn load_default() -> Result<UserConfig, ConfigError> {
        match Self::default_path() {
            None => Ok(UserConfig::default()),
            Some((path, named)) => match read_text(&path) {
                Ok(text) => Self::parse(&text, &path),
                Err(e) if e.kind() == io::ErrorKind::NotFound && !named => {
                    Ok(UserConfig::default())
                }
                Err(source) => Err(ConfigError::Read { path, source }),
            },
        }
    }

    /// The configuration the file `path` holds.
    pub fn load(path: &Path) -> Result<UserConfig, ConfigError> {
        let text = read_text(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses the text of a user configuration file (`path` names it in
    /// errors).
    pub fn parse(text: &str, path: &Path) -> Result<UserConfig, ConfigError> {
        // Syntax first, so that a key is only ever named in valid TOML.
        if let Err(e) = toml::de::DeTable::parse(text) {
            let (line, column) = e.span().map_or((1, 1), |s| line_column(text, s.start));
            return Err(ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().trim_end().to_string(),
            });
        }
        toml::from_str(text).map_err(|e| {
            let message = e.message().trim_end().to_string();
            let at = e.span().map_or(0, |s| s.start);
            let (key, key_at) = key_at(text, at).unwrap_or_default();
            let line = line_column(text, key_at.unwrap_or(at)).0;
            match message.strip_prefix("unknown field ") {
                Some(rest) => {
                    let expected = rest
                        .split_once(", ")
                        .map_or(String::new(), |(_, e)| e.to_string());
                    ConfigError::UnknownKey {
                        path: path.to_path_buf(),
                        line,
                        key,
                        expected,
                    }
                }
                None => ConfigError::BadValue {
                    path: path.to_path_buf(),
                    line,
                    key,
                    message,
                },
            }
        })
    }
}

impl S3Config {
    /// These settings with the environment's over them, key by key:
    /// `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`), `AWS_REGION` (or
    /// `AWS_DEFAULT_REGION`), `AWS_ALLOW_HTTP`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, and
    /// [`crate::REQUEST_TIMEOUT_ENV`], [`crate::RETRY_TIMEOUT_ENV`], [`CACHE_DIR_VAR`],
    /// [`CACHE_SIZE_VAR`]. An empty variable counts as unset.
    pub fn with_env(self) -> Result<S3Config, ConfigError> {
        self.with_vars(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// [`S3Config::with_env`] with the variables of `var`.
    pub fn with_vars(
        mut self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<S3Config, ConfigError> {
        let first = |names: &[&str]| names.iter().find_map(|n| var(n));
        if let Some(v) = first(&["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]) {
            self.endpoint = Some(v);
        }
        if let Some(v) = first(&["AWS_REGION", "AWS_DEFAULT_REGION"]) {
            self.region = Some(v);
        }
        if let Some(v) = var("AWS_ALLOW_HTTP") {
            self.allow_http = Some(match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(ConfigError::BadVariable {
                        var: "AWS_ALLOW_HTTP",
                        found: v,
                        expected: "true or false",
                    })
                }
            });
        }
        if let Some(v) = var("AWS_ACCESS_KEY_ID") {
            self.access_key_id = Some(v);
        }
        if let Some(v) = var("AWS_SECRET_ACCESS_KEY") {
            self.secret_access_key = Some(v);
        }
        if let Some(v) = first(&["AWS_SESSION_TOKEN", "AWS_TOKEN"]) {
            self.session_token = Some(v);
        }
        for (name, slot) in [
            (crate::REQUEST_TIMEOUT_ENV, &mut self.request_timeout),
            (crate::RETRY_TIMEOUT_ENV, &mut self.retry_timeout),
        ] {
            if let Some(v) = var(name) {
                *slot = Some(parse_duration(&v).ok_or(ConfigError::BadVariable {
                    var: name,
                    found: v,
                    expected: DURATION,
                })?);
            }
        }
        if let Some(v) = var(CACHE_DIR_VAR) {
            self.cache_dir = Some(PathBuf::from(v));
        }
        if let Some(v) = var(CACHE_SIZE_VAR) {
            self.cache_size = Some(parse_size(&v).ok_or(ConfigError::BadVariable {
                var: CACHE_SIZE_VAR,
                found: v,
                expected: SIZE,
            })?);
        }
        Ok(self)
    }

    /// Whether these settings give credentials (a key and its secret).
    pub fn has_credentials(&self) -> bool {
        let set = |s: &Option<String>| s.as_ref().is_some_and(|s| !s.is_empty());
        set(&self.access_key_id) && set(&self.secret_access_key)
    }
}

/// A duration more than 0: `30s`, `500ms`, `2m`, `1m 30s` (humantime), or
/// a number of seconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let d = match t.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(t).ok()?,
    };
    (!d.is_zero()).then_some(d)
}

/// A size: a number of bytes, or a number and a unit (`B`, `KiB`, `MiB`,
/// `GiB`, `TiB`, or the decimal `kB`, `MB`, `GB`, `TB`; `K`, `M`, `G`, `T`
/// are binary), with or without a space.
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit = unit.trim();
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(factor);
    }
    let n: f64 = number.parse().ok()?;
    let bytes = n * factor as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then(|| bytes.round() as u64)
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Option<Duration>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(DURATION)
        }
        // A number of seconds follows the rule of every other form
        // ([`parse_duration`]: more than 0).
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            parse_duration(&v.to_string())
                .map(Some)
                .ok_or_else(|| E::invalid_value(de::Unexpected::Signed(v), &self))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse_duration(v)
                .map(Some)
                .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }
    d.deserialize_any(V)
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = Option<u64>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(SIZE)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            u64::try_from(v)
                .map(Some)
                .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            parse_size(v)
                .map(Some)
                .ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
        }
    }
    d.deserialize_any(V)
}

/// The dotted key whose name or value covers byte `at` of `text` (valid
/// TOML), and where its name is.
fn key_at(text: &str, at: usize) -> Option<(String, Option<usize>)> {
    let table = toml::de::DeTable::parse(text).ok()?;
    let (mut path, start) = key_in(table.get_ref(), at)?;
    path.reverse();
    Some((path.join("."), Some(start)))
}

/// The key of `table` (or of a table below it) whose name or value covers
/// byte `at`: its path, innermost first, and where its name is. (The value
/// of a table given by a `[header]` spans only the header.)
fn key_in(table: &toml::de::DeTable<'_>, at: usize) -> Option<(Vec<String>, usize)> {
    for (k, v) in table.iter() {
        let name = k.get_ref().to_string();
        if let Some(t) = v.get_ref().as_table() {
            if let Some((mut path, start)) = key_in(t, at) {
                path.push(name);
                return Some((path, start));
            }
        }
        let value = v.span();
        if k.span().contains(&at) || value.contains(&at) || value.start == at {
            return Some((vec![name], k.span().start));
        }
    }
    None
}

/// 1-based line and column (in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (
        before.matches('\n').count() + 1,
        before[line_start..].chars().count() + 1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<UserConfig, ConfigError> {
        UserConfig::parse(text, Path::new("/home/u/.config/jp-store/config.toml"))
    }

    #[test]
    fn every_key_is_read() {
        let c = parse(
            "[s3]\nendpoint = \"http://127.0.0.1:9000\"\nregion = \"eu-west-3\"\n\
             allow_http = true\naccess_key_id = \"k\"\nsecret_access_key = \"s\"\n\
             session_token = \"t\"\nrequest_timeout = \"1500ms\"\nretry_timeout = 10\n\
             cache_dir = \"/tmp/c\"\ncache_size = \"512 MiB\"\n",
        )
        .expect("valid");
        let s = c.s3;
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(s.region.as_deref(), Some("eu-west-3"));
        assert_eq!(s.allow_http, Some(true));
        assert_eq!(s.access_key_id.as_deref(), Some("k"));
        assert_eq!(s.secret_access_key.as_deref(), Some("s"));
        assert_eq!(s.session_token.as_deref(), Some("t"));
        assert_eq!(s.request_timeout, Some(Duration::from_millis(1500)));
        assert_eq!(s.retry_timeout, Some(Duration::from_secs(10)));
        assert_eq!(s.cache_dir.as_deref(), Some(Path::new("/tmp/c")));
        assert_eq!(s.cache_size, Some(512 << 20));
        assert!(!format!("{s:?}").contains("\"s\""), "no secret printed");
        assert_eq!(parse("").expect("empty"), UserConfig::default());
    }

    #[test]
    fn unknown_keys_are_named_with_file_and_line() {
        let e = parse("[s3]\nregion = \"x\"\nendpont = \"http://h\"\n").expect_err("unknown");
        let text = e.to_string();
        assert!(
            matches!(&e, ConfigError::UnknownKey { key, line: 3, .. } if key == "s3.endpont"),
            "{e:?}"
        );
        assert!(
            text.starts_with("/home/u/.config/jp-store/config.toml:3: unknown key `s3.endpont`")
        );
        assert!(text.contains("`endpoint`"), "{text}");
        let e = parse("[store]\nx = 1\n").expect_err("unknown table");
        assert!(
            matches!(&e, ConfigError::UnknownKey { key, .. } if key == "store"),
            "{e:?}"
        );
        let e = parse("verbose = true\n").expect_err("unknown top-level key");
        assert!(matches!(&e, ConfigError::UnknownKey { key, line: 1, .. } if key == "verbose"));
    }

    #[test]
    fn bad_values_name_the_key_and_what_was_expected() {
        let cases = [
            (
                "[s3]\nrequest_timeout = \"soon\"\n",
                "s3.request_timeout",
                "a duration",
            ),
            (
                "[s3]\nrequest_timeout = true\n",
                "s3.request_timeout",
                "a duration",
            ),
            // Durations are more than 0 in every form.
            (
                "[s3]\nrequest_timeout = 0\n",
                "s3.request_timeout",
                "a duration more than 0",
            ),
            (
                "[s3]\nretry_timeout = 0\n",
                "s3.retry_timeout",
                "a duration more than 0",
            ),
            (
                "[s3]\nretry_timeout = \"0s\"\n",
                "s3.retry_timeout",
                "a duration more than 0",
            ),
            (
                "[s3]\nretry_timeout = -5\n",
                "s3.retry_timeout",
                "a duration more than 0",
            ),
            ("[s3]\ncache_size = \"big\"\n", "s3.cache_size", "a size"),
            ("[s3]\ncache_size = -1\n", "s3.cache_size", "a size"),
            ("[s3]\nallow_http = \"yes\"\n", "s3.allow_http", "a boolean"),
            ("[s3]\nendpoint = 9000\n", "s3.endpoint", "a string"),
            ("s3 = 1\n", "s3", "struct S3Config"),
        ];
        for (text, key, expected) in cases {
            let e = parse(text).expect_err(text);
            let shown = e.to_string();
            assert!(
                matches!(&e, ConfigError::BadValue { key: k, .. } if k == key),
                "{text}: {e:?}"
            );
            assert!(shown.contains(&format!("key `{key}`")), "{shown}");
            assert!(shown.contains(expected), "{text}: {shown}");
        }
        let e = parse("[s3\n").expect_err("syntax");
        assert!(matches!(e, ConfigError::Syntax { line: 1, .. }), "{e:?}");
    }

    #[test]
    fn the_environment_overrides_the_file_key_by_key() {
        let file = parse(
            "[s3]\nendpoint = \"http://file\"\nregion = \"file-region\"\n\
             request_timeout = \"9s\"\ncache_size = 100\n",
        )
        .expect("valid")
        .s3;
        let env = |name: &str| match name {
            "AWS_ENDPOINT_URL" => Some("http://env".to_string()),
            crate::REQUEST_TIMEOUT_ENV => Some("250ms".to_string()),
            "AWS_ALLOW_HTTP" => Some("true".to_string()),
            _ => None,
        };
        let s = file.clone().with_vars(env).expect("valid");
        assert_eq!(s.endpoint.as_deref(), Some("http://env"));
        assert_eq!(s.region.as_deref(), Some("file-region"));
        assert_eq!(s.request_timeout, Some(Duration::from_millis(250)));
        assert_eq!(s.allow_http, Some(true));
        assert_eq!(s.cache_size, Some(100));
        let bad = file.with_vars(|n| (n == CACHE_SIZE_VAR).then(|| "lots".to_string()));
        let e = bad.expect_err("bad variable");
        assert!(e
            .to_string()
            .starts_with("JP_STORE_CACHE_SIZE=\"lots\": expected a size"));
    }

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("1.5 KiB"), Some(1536));
        assert_eq!(parse_size("100MB"), Some(100_000_000));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("750ms"), Some(Duration::from_millis(750)));
        assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("later"), None);
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("0"), None);
        assert_eq!(parse_duration("0ms"), None);
    }
}
