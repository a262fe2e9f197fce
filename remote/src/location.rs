//! `s3://BUCKET/PREFIX`: where a store on S3 is.

use std::fmt;

/// Why a text is not the URL of a store on S3.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url:?} is not the URL of a store on S3 (s3://BUCKET/PREFIX): {reason}")]
pub struct LocationError {
    /// The text given (its first 200 characters).
    pub url: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A store on S3: a bucket, and the prefix of the store's keys in it
/// (`""` for the whole bucket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket: 3 to 63 of `a-z 0-9 . -`, starting and ending with a
    /// letter or digit.
    pub bucket: String,
    /// The key prefix, without leading or trailing `/`: segments of any
    /// characters but `/`, none empty, `.` or `..`.
    pub prefix: String,
}

impl S3Location {
    /// Parses `s3://BUCKET` or `s3://BUCKET/PREFIX` (a trailing `/` is
    /// allowed).
    pub fn parse(text: &str) -> Result<Self, LocationError> {
        let fail = |reason| LocationError {
            url: text.chars().take(200).collect(),
            reason,
        };
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| fail("it does not start with s3://"))?;
        if !scheme.eq_ignore_ascii_case("s3") {
            return Err(fail("it does not start with s3://"));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && bucket
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
            && bucket
                .bytes()
                .last()
                .is_some_and(|b| b.is_ascii_alphanumeric());
        if !valid_bucket {
            return Err(fail(
                "a bucket name is 3 to 63 of a-z, 0-9, `.` and `-`, starting and ending with a letter or digit",
            ));
        }
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        if !prefix.is_empty() {
            for segment in prefix.split('/') {
                if segment.is_empty() || segment == "." || segment == ".." {
                    return Err(fail(
                        "the prefix has an empty, `.` or `..` segment (`//`, `/./`, `/../`)",
                    ));
                }
                if segment
                    .chars()
                    .any(|c| c.is_control() || c == '\\' || c == '?' || c == '#')
                {
                    return Err(fail("the prefix has a control character, `\\`, `?` or `#`"));
                }
            }
        }
        Ok(S3Location {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }
}

impl fmt::Display for S3Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_buckets_and_prefixes_and_refuses_the_rest() {
        let l = S3Location::parse("s3://my-bucket/team/store/").expect("valid");
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("my-bucket", "team/store")
        );
        assert_eq!(l.to_string(), "s3://my-bucket/team/store");
        let l = S3Location::parse("s3://abc").expect("valid");
        assert_eq!(l.prefix, "");
        for bad in [
            "s3://ab/x",
            "s3://Upper/x",
            "s3://-abc/x",
            "s3://abc/a//b",
            "s3://abc/a/../b",
            "s3://abc/./b",
            "http://abc/x",
            "abc",
        ] {
            assert!(S3Location::parse(bad).is_err(), "accepted {bad:?}");
        }
    }
}
