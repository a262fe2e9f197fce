//! Making a store (`init`, and `copy` into a new destination) on a full disk
//! or with a failing sync: the command fails and leaves the directory as it
//! found it, so that running it again once the cause is gone makes the
//! store whole (format-spec.md 1).

use jpstore_engine::internal::StoreInterior as _;
use std::io;
use std::path::Path;

use jpstore_blobstore::backend::read_all;
use jpstore_blobstore::storage::sim::SimStorage;
use jpstore_blobstore::storage::LocalStorage;
use jpstore_engine::internal::copy::open_or_init_like;
use jpstore_engine::Store;
use jpstore_tests::crash::{modes, options, storage};

/// What the simulated disk holds, by name.
fn names(sim: &SimStorage) -> Vec<String> {
    sim.snapshot()
        .keys()
        .map(|p| p.display().to_string())
        .collect()
}

/// The bytes of the store's `config.toml`, if it has one.
fn config_of(store: &Store) -> Option<Vec<u8>> {
    let file = match store.backend().open(Path::new("config.toml")) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => panic!("open config.toml: {e}"),
    };
    Some(read_all(&*file, 1 << 20).expect("read config.toml"))
}

/// A fault a store's creation meets.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// A full disk after this many bytes.
    FullAfter(u64),
    /// A failed sync.
    Sync,
}

impl Fault {
    fn all() -> [Fault; 4] {
        [
            Fault::FullAfter(0),
            Fault::FullAfter(1),
            Fault::FullAfter(100),
            Fault::Sync,
        ]
    }

    fn arm(self, sim: &SimStorage) {
        match self {
            Fault::FullAfter(bytes) => sim.fail_writes_after(bytes),
            Fault::Sync => sim.fail_next_sync(io::ErrorKind::Other),
        }
    }
}

#[test]
fn an_init_that_fails_leaves_the_directory_empty_and_a_second_init_makes_the_store() {
    for fault in Fault::all() {
        let what = format!("{fault:?}");
        let sim = SimStorage::new();
        fault.arm(&sim);
        let err = Store::init_new(storage(&sim), "store".into(), options())
            .map(drop)
            .expect_err("an init on a failing disk succeeded");
        assert!(
            err.to_string().contains("config.toml") || err.to_string().contains("sync"),
            "{what}: {err}"
        );
        // Before the undo: `conversations/` was left, a store without its
        // config that a second `init` took for made and left as it was.
        assert_eq!(names(&sim), Vec::<String>::new(), "{what}: left behind");
        sim.clear_faults();
        let (store, made) =
            Store::init_new(storage(&sim), "store".into(), options()).expect("init with room");
        assert!(made, "{what}: the second init made no store");
        assert!(
            config_of(&store).is_some(),
            "{what}: the store has no config.toml"
        );
    }
}

#[test]
fn a_copy_into_a_new_store_that_fails_leaves_the_destination_empty() {
    let src_sim = SimStorage::new();
    let src = Store::init(storage(&src_sim), options()).expect("source store");
    let config = config_of(&src).expect("the source has a config");
    // Also where a copy stopped before left the config it puts first: the
    // store is then made on top of it, and the fault comes later.
    for (fault, config_there) in Fault::all()
        .into_iter()
        .flat_map(|f| [(f, false), (f, true)])
    {
        let sim = SimStorage::new();
        if config_there {
            storage(&sim)
                .put_if_absent(
                    Path::new("config.toml"),
                    &config,
                    Path::new("config.toml.tmp.1"),
                )
                .expect("the config of a copy stopped before");
        }
        fault.arm(&sim);
        let what = format!("{fault:?}, config there before: {config_there}");
        let err = open_or_init_like(&src, storage(&sim), "dst".into(), options())
            .map(drop)
            .expect_err("a copy's store made on a failing disk");
        assert_eq!(
            names(&sim),
            Vec::<String>::new(),
            "{what}: left behind ({err})"
        );
        sim.clear_faults();
        let (dst, made) = open_or_init_like(&src, storage(&sim), "dst".into(), options())
            .expect("made with room");
        assert!(made, "{what}");
        assert_eq!(
            config_of(&dst),
            Some(config.clone()),
            "{what}: the destination has not the source's config"
        );
    }
}

#[test]
fn a_directory_made_for_a_store_is_removed_only_while_empty() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("new");
    let (made_here, made) = LocalStorage::create_new(&dir).expect("create");
    assert!(made, "a new directory not said to be made");
    let (_, again) = LocalStorage::create_new(&dir).expect("create again");
    assert!(!again, "an existing directory said to be made");
    std::fs::write(dir.join("kept"), b"someone else's").expect("write");
    assert!(
        made_here.remove_root_if_empty().is_err(),
        "a directory holding a file was removed"
    );
    assert!(dir.join("kept").exists(), "the file is gone");
    std::fs::remove_file(dir.join("kept")).expect("remove");
    made_here
        .remove_root_if_empty()
        .expect("remove the empty directory");
    assert!(!dir.exists(), "the empty directory is still there");
    assert!(tmp.path().exists(), "its parent went with it");
}

#[test]
fn an_init_stopped_at_any_sync_is_completed_by_the_next() {
    // The config is written first and `conversations/`, which makes the
    // directory a store, last: a crash leaves no store without its config,
    // and what it leaves (the config, or its temp name) the next init
    // takes as its own.
    let sim = SimStorage::new();
    let start = sim.sync_count();
    Store::init_new(storage(&sim), "store".into(), options()).expect("init");
    let syncs = sim.sync_count() - start;
    assert!(syncs >= 2, "only {syncs} syncs");
    for n in 1..=syncs {
        for mode in modes() {
            let what = format!("crash at sync {n} of {syncs}, {mode:?}");
            let sim = SimStorage::new();
            sim.crash_at_sync(n, mode);
            let stopped = Store::init_new(storage(&sim), "store".into(), options());
            assert!(sim.is_down(), "{what}: the crash did not happen");
            drop(stopped);
            sim.restart();
            let left = names(&sim);
            assert!(
                !left.iter().any(|n| n.contains("conversations"))
                    || left.iter().any(|n| n == "config.toml"),
                "{what}: a store without its config: {left:?}"
            );
            let (store, made) = Store::init_new(storage(&sim), "store".into(), options())
                .unwrap_or_else(|e| panic!("{what}: the next init: {e}"));
            assert!(
                made || left.iter().any(|n| n.contains("conversations")),
                "{what}: not made, from {left:?}"
            );
            assert_eq!(
                config_of(&store).as_deref(),
                Some(jpstore_engine::internal::config::WORKSPACE_CONFIG_TEMPLATE.as_bytes()),
                "{what}"
            );
        }
    }
}
