//! The user configuration file of stores on S3 (format-spec.md 5.7): a
//! store reached with the file alone, no `AWS_*` variable; the environment
//! over the file, the flags over both; a bad file or variable refused naming
//! the file, the key (or the variable) and what was expected. Against a real
//! server (SeaweedFS, see `jpstore_remote::testing`); the tests that need
//! none run without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use jpstore_remote::testing::server_or_skip;
use jpstore_tests::s3_fault_proxy::{Fault, FaultProxy, Rule};
use jpstore_tests::{jp_store_bin, output_of, stdout_of_success};

/// A command with nothing of the environment that configures S3 (nor the
/// user's own configuration), a home of its own.
fn bare(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(jp_store_bin());
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") || k.starts_with("JP_STORE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_CACHE_HOME");
    cmd
}

fn run(mut cmd: Command, stdin: &[u8]) -> Output {
    output_of(&mut cmd, stdin)
}

fn ok(cmd: Command, stdin: &[u8]) -> String {
    let what = format!("{cmd:?}");
    stdout_of_success(run(cmd, stdin), what)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The `[s3]` table that reaches `server` at `endpoint`, with `extra` lines.
fn s3_table(endpoint: &str, extra: &str) -> String {
    format!(
        "# jp-store's user configuration\n[s3]\nendpoint = \"{endpoint}\"\nregion = \"us-east-1\"\n\
         allow_http = true\naccess_key_id = \"jpstore-test\"\nsecret_access_key = \"jpstore-test\"\n{extra}"
    )
}

/// Writes `text` as `~/.config/jp-store/config.toml` below `home`.
fn write_home_config(home: &Path, text: &str) -> PathBuf {
    let path = home.join(".config").join("jp-store").join("config.toml");
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&path, text).expect("write the configuration");
    path
}

/// The cache subdirectories (one per store) below `dir`.
fn caches_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.expect("entry").path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("s3-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Bytes of the cache entries below `dir` (temp files left out).
fn cached_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for store in caches_in(dir) {
        for fan in std::fs::read_dir(&store).expect("cache dir").flatten() {
            if fan.file_name() == "tmp" {
                continue;
            }
            for f in std::fs::read_dir(fan.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                total += f.metadata().map_or(0, |m| m.len());
            }
        }
    }
    total
}

fn request(text: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!([{"type": "chat_request", "content": text}]))
        .expect("json")
}

/// With only `~/.config/jp-store/config.toml` (no `AWS_*` variable), every
/// command reaches the store; its `cache_dir` is where the cache goes.
#[test]
fn a_store_on_s3_is_reached_with_only_the_user_configuration_file() {
    let Some(server) =
        server_or_skip("a_store_on_s3_is_reached_with_only_the_user_configuration_file")
    else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let cache = home.path().join("my-cache");
    write_home_config(
        home.path(),
        &s3_table(
            &server.endpoint,
            &format!(
                "request_timeout = \"20s\"\nretry_timeout = \"1m\"\ncache_dir = \"{}\"\ncache_size = \"64 MiB\"\n",
                cache.display()
            ),
        ),
    );
    let url = server.fresh("config-file").to_string();
    let cmd = |args: &[&str]| {
        let mut all = vec!["--store", &url];
        all.extend_from_slice(args);
        bare(home.path(), &all)
    };
    assert_eq!(ok(cmd(&["init"]), b"").trim(), url);
    let id = ok(cmd(&["new"]), b"").trim().to_string();
    ok(cmd(&["append", &id]), &request("configured by a file"));
    let view = ok(cmd(&["view", &id]), b"");
    assert!(view.contains("configured by a file"), "{view}");
    assert_eq!(caches_in(&cache).len(), 1, "the cache is below cache_dir");
    assert!(cached_bytes(&cache) > 0, "and holds the log's objects");
    // XDG_CONFIG_HOME, then JP_STORE_CONFIG, name the file instead.
    let xdg = tempfile::tempdir().expect("tempdir");
    let moved = xdg.path().join("jp-store").join("config.toml");
    std::fs::create_dir_all(moved.parent().expect("a parent")).expect("mkdir");
    std::fs::rename(home.path().join(".config/jp-store/config.toml"), &moved)
        .expect("move the file");
    let mut c = cmd(&["ls"]);
    c.env("XDG_CONFIG_HOME", xdg.path());
    assert!(ok(c, b"").contains(&id));
    let named = home.path().join("elsewhere.toml");
    std::fs::rename(&moved, &named).expect("move the file");
    let mut c = cmd(&["ls"]);
    c.env("JP_STORE_CONFIG", &named);
    assert!(ok(c, b"").contains(&id));
    // Without any file: no credentials, named.
    let out = run(cmd(&["ls"]), b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no credentials for") && stderr(&out).contains("access_key_id"),
        "{}",
        stderr(&out)
    );
}

/// The environment overrides the file key by key, and the flags override
/// both: the endpoint, the cache directory and its size, the request
/// timeout.
#[test]
fn the_environment_overrides_the_file_and_the_flags_override_both() {
    let Some(server) =
        server_or_skip("the_environment_overrides_the_file_and_the_flags_override_both")
    else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let (file_cache, env_cache, flag_cache) = (
        home.path().join("file-cache"),
        home.path().join("env-cache"),
        home.path().join("flag-cache"),
    );
    // The file names a server that is not there (a port nothing listens
    // on): only the environment's endpoint reaches the store.
    let nowhere = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        format!("http://{}", l.local_addr().expect("address"))
    };
    write_home_config(
        home.path(),
        &s3_table(
            &nowhere,
            &format!(
                "cache_dir = \"{}\"\ncache_size = \"1 GiB\"\nretry_timeout = \"1s\"\n",
                file_cache.display()
            ),
        ),
    );
    let url = server.fresh("config-precedence").to_string();
    let cmd = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["--store", &url];
        all.extend_from_slice(args);
        let mut c = bare(home.path(), &all);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    let out = run(cmd(&["init"], &[]), b"");
    assert_eq!(out.status.code(), Some(1), "the file's endpoint is used");
    assert!(stderr(&out).contains(&url), "{}", stderr(&out));
    let endpoint = [("AWS_ENDPOINT_URL", server.endpoint.as_str())];
    ok(cmd(&["init"], &endpoint), b"");
    let id = ok(cmd(&["new"], &endpoint), b"").trim().to_string();
    ok(cmd(&["append", &id], &endpoint), &request("precedence"));
    ok(cmd(&["view", &id], &endpoint), b"");
    // One cache per endpoint: the file's (where nothing was read) and the
    // environment's.
    assert_eq!(caches_in(&file_cache).len(), 2, "the file's cache_dir");
    assert!(cached_bytes(&file_cache) > 0, "the file's cache_dir");
    let env_cache_s = env_cache.to_str().expect("UTF-8");
    let flag_cache_s = flag_cache.to_str().expect("UTF-8");
    let both = [
        endpoint[0],
        ("JP_STORE_CACHE_DIR", env_cache_s),
        // Smaller than any object: nothing stays in the cache.
        ("JP_STORE_CACHE_SIZE", "1"),
    ];
    ok(cmd(&["view", &id], &both), b"");
    assert_eq!(caches_in(&env_cache).len(), 1, "JP_STORE_CACHE_DIR");
    assert_eq!(
        cached_bytes(&env_cache),
        0,
        "JP_STORE_CACHE_SIZE over the file's"
    );
    ok(
        cmd(
            &[
                "--cache-dir",
                flag_cache_s,
                "--cache-size",
                "64MiB",
                "view",
                &id,
            ],
            &both,
        ),
        b"",
    );
    assert_eq!(caches_in(&flag_cache).len(), 1, "--cache-dir over both");
    assert!(cached_bytes(&flag_cache) > 0, "--cache-size over both");
    // --no-cache over the variable (and the file): no cache, no usage error
    // naming a --cache-dir the user did not give.
    let off_cache = home.path().join("off-cache");
    let off = run(
        cmd(
            &["--no-cache", "view", &id],
            &[
                endpoint[0],
                ("JP_STORE_CACHE_DIR", off_cache.to_str().expect("UTF-8")),
            ],
        ),
        b"",
    );
    assert_eq!(off.status.code(), Some(0), "{}", stderr(&off));
    assert!(!off_cache.exists(), "--no-cache over JP_STORE_CACHE_DIR");

    // The request timeout: the file's, then the environment's, named by
    // the error of a create whose answer is held past it.
    let proxy = FaultProxy::start(&server.endpoint);
    let via = [("AWS_ENDPOINT_URL", proxy.endpoint())];
    std::fs::write(
        home.path().join(".config/jp-store/config.toml"),
        s3_table(&nowhere, "request_timeout = \"1s\"\n"),
    )
    .expect("rewrite the configuration");
    for (env_timeout, said) in [
        (None, "request timeout of 1s"),
        (Some("2s"), "request timeout of 2s"),
    ] {
        proxy.add(Rule::on(
            "PUT",
            "events.log.seg/",
            Fault::HoldAnswer(Duration::from_secs(4)),
        ));
        let mut env: Vec<(&str, &str)> = vec![("AWS_ENDPOINT_URL", via[0].1.as_str())];
        if let Some(t) = env_timeout {
            env.push(("JP_STORE_S3_REQUEST_TIMEOUT", t));
        }
        let out = run(cmd(&["--no-cache", "append", &id], &env), &request("held"));
        proxy.clear();
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains(said), "{said}: {}", stderr(&out));
    }
}

/// A bad file, value or variable stops a command on S3 with exit 1, naming
/// the file and line, the key and what was expected (or the variable); a
/// store in a directory does not read the file at all.
#[test]
fn bad_user_configuration_is_refused_naming_file_key_and_expectation() {
    let home = tempfile::tempdir().expect("tempdir");
    let local = home.path().join("local-store");
    let cmd = |args: &[&str]| bare(home.path(), args);
    let s3 = ["--store", "s3://some-bucket/p", "ls"];
    for (text, wanted) in [
        (
            "[s3]\nregion = \"eu-west-1\"\nendpont = \"http://h\"\n",
            vec![":3: unknown key `s3.endpont`", "`endpoint`"],
        ),
        (
            "[s3]\nrequest_timeout = \"soon\"\n",
            vec![":2: key `s3.request_timeout`", "expected a duration"],
        ),
        (
            "[s3]\ncache_size = \"huge\"\n",
            vec![":2: key `s3.cache_size`", "expected a size such as"],
        ),
        // A duration is more than 0 however it is written.
        (
            "[s3]\nretry_timeout = 0\n",
            vec![
                ":2: key `s3.retry_timeout`",
                "expected a duration more than 0",
            ],
        ),
        (
            "[s3]\nregion = \"r\"\nrequest_timeout = 0\n",
            vec![
                ":3: key `s3.request_timeout`",
                "expected a duration more than 0",
            ],
        ),
        (
            "[s3]\nretry_timeout = \"0s\"\n",
            vec![
                ":2: key `s3.retry_timeout`",
                "expected a duration more than 0",
            ],
        ),
        (
            "[s3]\nallow_http = \"yes\"\n",
            vec!["key `s3.allow_http`", "expected a boolean"],
        ),
        (
            "[store]\ndir = \"x\"\n",
            vec![":1: unknown key `store`", "`s3`"],
        ),
        ("[s3\n", vec![":1:", "invalid TOML"]),
    ] {
        let path = write_home_config(home.path(), text);
        let out = run(cmd(&s3), b"");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{text}: {err}");
        assert!(
            err.contains(&path.display().to_string()),
            "{text}: the file is named: {err}"
        );
        for w in wanted {
            assert!(err.contains(w), "{text}: {w:?} in {err}");
        }
        // A store in a directory does not read it.
        let mut c = cmd(&["--store", local.to_str().expect("UTF-8"), "init"]);
        c.current_dir(home.path());
        ok(c, b"");
    }
    std::fs::remove_file(home.path().join(".config/jp-store/config.toml")).expect("rm");

    // A file named by JP_STORE_CONFIG must be there.
    let missing = home.path().join("missing.toml");
    let mut c = cmd(&s3);
    c.env("JP_STORE_CONFIG", &missing);
    let out = run(c, b"");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&missing.display().to_string()),
        "{}",
        stderr(&out)
    );
    // Variables.
    for (var, value, wanted) in [
        (
            "JP_STORE_CACHE_SIZE",
            "lots",
            "JP_STORE_CACHE_SIZE=\"lots\": expected a size",
        ),
        (
            "JP_STORE_S3_REQUEST_TIMEOUT",
            "-3",
            "JP_STORE_S3_REQUEST_TIMEOUT=\"-3\": expected a duration",
        ),
        (
            "JP_STORE_S3_RETRY_TIMEOUT",
            "0",
            "JP_STORE_S3_RETRY_TIMEOUT=\"0\": expected a duration more than 0",
        ),
        (
            "AWS_ALLOW_HTTP",
            "maybe",
            "AWS_ALLOW_HTTP=\"maybe\": expected true or false",
        ),
    ] {
        let mut c = cmd(&s3);
        c.env(var, value);
        let out = run(c, b"");
        assert_eq!(out.status.code(), Some(1), "{var}");
        assert!(stderr(&out).contains(wanted), "{var}: {}", stderr(&out));
    }
    // Both flags given: a usage error.
    let out = run(
        cmd(&[
            "--no-cache",
            "--cache-dir",
            "x",
            "--store",
            "s3://some-bucket/p",
            "ls",
        ]),
        b"",
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--cache-dir"), "{}", stderr(&out));
    // A bad flag is a usage error.
    let out = run(
        cmd(&["--cache-size", "big", "--store", "s3://b/p", "ls"]),
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("is not a size"), "{}", stderr(&out));
}

/// An `http://` endpoint without AWS_ALLOW_HTTP names the setting (it said
/// "URL scheme is not allowed"); with no endpoint configured a note says
/// that AWS's default endpoint is used (-q silences it). No server needed:
/// the first is refused before any request, and the second is only looked
/// at for its note (requests to AWS fail fast without network, or are
/// refused for the test's credentials).
#[test]
fn an_http_endpoint_names_allow_http_and_the_default_endpoint_is_said() {
    let home = tempfile::tempdir().expect("tempdir");
    let creds = [
        ("AWS_ACCESS_KEY_ID", "jpstore-test"),
        ("AWS_SECRET_ACCESS_KEY", "jpstore-test"),
        ("JP_STORE_S3_RETRY_TIMEOUT", "1s"),
        ("JP_STORE_S3_REQUEST_TIMEOUT", "1s"),
    ];
    let s3 = ["--store", "s3://some-bucket/p", "--no-cache", "ls"];
    for allow in [None, Some("false")] {
        let mut cmd = bare(home.path(), &s3);
        cmd.envs(creds)
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9");
        if let Some(a) = allow {
            cmd.env("AWS_ALLOW_HTTP", a);
        }
        let out = run(cmd, b"");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("http://127.0.0.1:9")
                && err.contains("AWS_ALLOW_HTTP=true")
                && err.contains("allow_http = true")
                && !err.contains("URL scheme is not allowed"),
            "{err}"
        );
    }
    // The same in the file.
    write_home_config(
        home.path(),
        "[s3]\nendpoint = \"http://127.0.0.1:9\"\naccess_key_id = \"k\"\nsecret_access_key = \"s\"\n",
    );
    let out = run(bare(home.path(), &s3), b"");
    assert!(
        stderr(&out).contains("AWS_ALLOW_HTTP=true"),
        "{}",
        stderr(&out)
    );
    std::fs::remove_file(home.path().join(".config/jp-store/config.toml")).expect("rm");

    let said = "is on AWS's default endpoint, https://s3.eu-west-3.amazonaws.com";
    let mut cmd = bare(home.path(), &s3);
    cmd.envs(creds).env("AWS_REGION", "eu-west-3");
    let err = stderr(&run(cmd, b""));
    assert!(
        err.contains(said) && err.contains("AWS_ENDPOINT_URL"),
        "{err}"
    );
    let mut quiet = vec!["-q"];
    quiet.extend(s3);
    let mut cmd = bare(home.path(), &quiet);
    cmd.envs(creds).env("AWS_REGION", "eu-west-3");
    let err = stderr(&run(cmd, b""));
    assert!(!err.contains("default endpoint"), "{err}");
    // An endpoint configured: no note.
    let mut cmd = bare(home.path(), &s3);
    cmd.envs(creds)
        .env("AWS_ENDPOINT_URL", "https://127.0.0.1:9")
        .env("AWS_REGION", "eu-west-3");
    let err = stderr(&run(cmd, b""));
    assert!(!err.contains("default endpoint"), "{err}");
}

/// The hint of a command on a store that is not one gives the `init` of
/// that store: with its `--store`, quoted when it needs to be.
#[test]
fn not_a_store_gives_the_init_of_that_store() {
    let home = tempfile::tempdir().expect("tempdir");
    for name in ["plain", "with space"] {
        let dir = home.path().join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("notes.txt"), "not a store").expect("write");
        let path = dir.to_str().expect("UTF-8");
        let out = run(bare(home.path(), &["--store", path, "ls"]), b"");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let init = if name == "plain" {
            format!("`jp-store --store {path} init`")
        } else {
            format!("`jp-store --store '{path}' init`")
        };
        assert!(err.contains(&init), "{init} in {err}");
    }
    // The default store: `jp-store init` as it is.
    let mut cmd = bare(home.path(), &["ls"]);
    cmd.current_dir(home.path());
    let err = stderr(&run(cmd, b""));
    assert!(err.contains("create one with `jp-store init`"), "{err}");
}
