//! Tests of the log framing through its public API.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use jpstore_blobstore::backend::{Backend, FileBackend};
use jpstore_blobstore::storage::{
    DirEntry, FileId, LocalStorage, LockKind, Mapping, Metadata, OpenMode, Storage, StorageFile,
};

use super::record::{self, encode_batch};
use super::*;
use crate::error::Error;

const LOG: &str = "conv.log";

fn store() -> (tempfile::TempDir, FileBackend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = LocalStorage::open(dir.path()).expect("storage");
    (dir, FileBackend::new(Arc::new(storage)))
}

/// Batch `i` of writer `tag`: 1 to 3 entries of varied sizes, the first one
/// naming the batch, the others derived from it (so a mixed-up batch shows).
fn batch(tag: u8, i: u32, big: bool) -> Vec<Vec<u8>> {
    let mut entries = vec![format!("{tag}:{i}").into_bytes()];
    for j in 0..(i % 3) {
        let len = if big {
            (i as usize * 7919 + j as usize * 104_729) % 150_000
        } else {
            (i as usize * 13 + j as usize * 5) % 40
        };
        entries.push((0..len).map(|k| (k as u32 ^ i ^ j) as u8 ^ tag).collect());
    }
    entries
}

fn open_writer(storage: &dyn Backend, name: &str) -> LogWriter {
    LogWriter::open(storage, Path::new(name), LogOptions::default()).expect("open writer")
}

fn scan_ok(storage: &dyn Backend, name: &str) -> Scan {
    scan(storage, Path::new(name), LogOptions::default()).expect("scan")
}

/// Both framings: the framing tests run in each.
const FRAMINGS: [Framing; 2] = [Framing::V1, Framing::V2];

/// A new empty log of `framing`.
fn create(storage: &dyn Backend, name: &str, framing: Framing, options: LogOptions) -> LogWriter {
    let format = match framing {
        Framing::V1 => LogFormat::v1(0),
        Framing::V2 => LogFormat::v2(),
    };
    LogWriter::create_published(
        storage,
        Path::new(name),
        options,
        format,
        &[],
        &mut |_| Ok(()),
        &mut || {},
    )
    .expect("create")
}

/// A test batch as the sections of a version 2 record: a heads section of
/// no entry whose aux is the batch's version 1 encoding, and a body of the
/// entries back to back in reverse order (so a torn or mixed-up body shows).
fn split_of(batch: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    let aux = encode_batch(batch);
    let body: Vec<u8> = batch.iter().rev().flatten().copied().collect();
    let section = HeadsSection {
        count: 0,
        aux_len: aux.len() as u32,
        body_raw_len: body.len() as u32,
        heads_codec: CODEC_PLAIN,
        body_codec: CODEC_PLAIN,
    };
    let mut heads = section.encode().to_vec();
    heads.extend_from_slice(&aux);
    (heads, body)
}

/// Appends `batch` in the log's framing.
fn append(w: &mut LogWriter, batch: &[Vec<u8>]) -> Result<u64, Error> {
    match w.format().framing {
        Framing::V1 => w.append(batch),
        Framing::V2 => {
            let (heads, body) = split_of(batch);
            w.append_split(&heads, &body)
        }
    }
}

/// The test batch a record holds (either framing).
fn batch_of(record: &Record) -> Vec<Vec<u8>> {
    match &record.content {
        RecordContent::Batch(entries) => entries.clone(),
        RecordContent::Split { heads, body } => {
            let batch = record::decode_batch(&heads[16..]).expect("a test batch in aux");
            assert_eq!(split_of(&batch).1, *body, "the body of a test batch");
            batch
        }
    }
}

fn entries_of(scan: &Scan) -> Vec<Vec<Vec<u8>>> {
    scan.records.iter().map(batch_of).collect()
}

/// A small log of five batches in `framing`; returns its bytes and record
/// boundaries.
fn small_log_of(
    dir: &Path,
    storage: &dyn Backend,
    framing: Framing,
) -> (Vec<u8>, Vec<u64>, Vec<Vec<Vec<u8>>>) {
    let mut w = create(storage, LOG, framing, LogOptions::default());
    let batches: Vec<_> = (0..5).map(|i| batch(1, i, false)).collect();
    let mut bounds = vec![FIRST_RECORD];
    for b in &batches {
        let off = append(&mut w, b).expect("append");
        assert_eq!(off, *bounds.last().expect("nonempty"));
        bounds.push(w.end());
    }
    drop(w);
    let bytes = fs::read(dir.join(LOG)).expect("read");
    assert_eq!(bytes.len() as u64, *bounds.last().expect("nonempty"));
    (bytes, bounds, batches)
}

#[test]
fn append_then_read_back_across_reopen() {
    for framing in FRAMINGS {
        let (_dir, storage) = store();
        let mut w = create(&storage, LOG, framing, LogOptions::default());
        assert_eq!(w.end(), FIRST_RECORD);
        assert_eq!(w.cut_tail(), None);
        let first: Vec<_> = (0..4).map(|i| batch(1, i, true)).collect();
        for b in &first {
            append(&mut w, b).expect("append");
        }
        let end = w.end();
        drop(w);

        let s = scan_ok(&storage, LOG);
        assert_eq!(entries_of(&s), first);
        assert_eq!(s.end, LogEnd::Clean { offset: end });

        let mut w = open_writer(&storage, LOG);
        assert_eq!(w.end(), end);
        assert_eq!(w.cut_tail(), None);
        let second: Vec<_> = (4..9).map(|i| batch(1, i, true)).collect();
        for b in &second {
            append(&mut w, b).expect("append");
        }
        // Slices of byte slices are batches too.
        append(&mut w, &[b"a".to_vec(), Vec::new()]).expect("append slices");
        drop(w);

        let mut all = first;
        all.extend(second);
        all.push(vec![b"a".to_vec(), Vec::new()]);
        let s = scan_ok(&storage, LOG);
        assert_eq!(entries_of(&s), all);
        for pair in s.records.windows(2) {
            assert_eq!(pair[0].end(), pair[1].offset);
        }
    }
}

#[test]
fn create_publishes_whole_or_refuses() {
    let (dir, storage) = store();
    let w = LogWriter::create(&storage, Path::new(LOG), LogOptions::default()).expect("create");
    drop(w);
    let err = LogWriter::create(&storage, Path::new(LOG), LogOptions::default())
        .expect_err("created twice");
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert_eq!(fs::read(dir.path().join(LOG)).expect("read").len(), 16);
    let mut names: Vec<_> = storage
        .storage()
        .read_dir(Path::new("."))
        .expect("ls")
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [LOG.to_string(), format!("{LOG}.lock")],
        "temp files left"
    );
    let missing = LogWriter::open(&storage, Path::new("other.log"), LogOptions::default())
        .expect_err("opened a missing log");
    assert!(missing.to_string().contains("other.log"), "{missing}");
}

#[test]
fn empty_batch_is_refused() {
    let (_dir, storage) = store();
    let mut w = LogWriter::create(&storage, Path::new(LOG), LogOptions::default()).expect("create");
    let none: [Vec<u8>; 0] = [];
    assert!(matches!(w.append(&none), Err(Error::EmptyBatch { .. })));
    assert_eq!(w.end(), FIRST_RECORD);
    w.append(&[b"x"]).expect("append after refusal");
}

#[test]
fn truncation_at_every_offset_keeps_exactly_the_complete_batches() {
    for framing in FRAMINGS {
        let (dir, storage) = store();
        let (bytes, bounds, batches) = small_log_of(dir.path(), &storage, framing);
        let extra = vec![b"after recovery".to_vec()];
        for cut in 0..=bytes.len() {
            let name = format!("cut{cut}.log");
            fs::write(dir.path().join(&name), &bytes[..cut]).expect("write");
            let cut = cut as u64;
            if cut < FILE_HEADER_LEN {
                let err = LogReader::open(&storage, Path::new(&name), LogOptions::default())
                    .expect_err("short header accepted");
                assert!(matches!(err, Error::Corrupt { offset: 0, .. }), "{err}");
                let err = LogWriter::open(&storage, Path::new(&name), LogOptions::default())
                    .expect_err("short header accepted");
                assert!(matches!(err, Error::Corrupt { offset: 0, .. }), "{err}");
                continue;
            }
            let complete = bounds.iter().filter(|&&b| b <= cut).count() - 1;
            let valid_end = bounds[complete];
            let expected_end = if valid_end == cut {
                LogEnd::Clean { offset: cut }
            } else {
                LogEnd::TornTail {
                    offset: valid_end,
                    len: cut - valid_end,
                }
            };

            // A reader sees the complete batches and does not touch the file.
            let s = scan_ok(&storage, &name);
            assert_eq!(entries_of(&s), &batches[..complete], "cut at {cut}");
            assert_eq!(s.end, expected_end, "cut at {cut}");
            assert_eq!(
                fs::metadata(dir.path().join(&name)).expect("stat").len(),
                cut
            );

            // A writer cuts the torn tail, says so, and appends after it.
            let mut w = open_writer(&storage, &name);
            assert_eq!(w.end(), valid_end, "cut at {cut}");
            let expected_cut = (valid_end != cut).then_some((valid_end, cut - valid_end));
            assert_eq!(
                w.cut_tail().map(|c| (c.offset, c.len)),
                expected_cut,
                "cut at {cut}"
            );
            // Nothing is cut without a synced copy of its bytes.
            if let Some(c) = w.cut_tail() {
                let copy = fs::read(dir.path().join(&c.copy)).expect("the copy of the cut tail");
                assert_eq!(copy.len() as u64, c.len, "cut at {cut}");
            }
            assert_eq!(
                fs::metadata(dir.path().join(&name)).expect("stat").len(),
                valid_end
            );
            append(&mut w, &extra).expect("append");
            drop(w);
            let s = scan_ok(&storage, &name);
            let mut want = batches[..complete].to_vec();
            want.push(extra.clone());
            assert_eq!(entries_of(&s), want, "cut at {cut}");
            assert!(matches!(s.end, LogEnd::Clean { .. }));
            fs::remove_file(dir.path().join(&name)).expect("rm");
        }
    }
}

#[test]
fn zero_filled_tail_is_torn_unless_longer_than_a_record() {
    for framing in FRAMINGS {
        let (dir, storage) = store();
        let (bytes, bounds, batches) = small_log_of(dir.path(), &storage, framing);
        let end = *bounds.last().expect("nonempty");
        let max = match framing {
            Framing::V1 => 100,
            Framing::V2 => 200,
        };
        let small = LogOptions {
            max_record_size: max,
        };
        let header = framing.record_header_len() as usize;
        for zeros in [
            1usize,
            header - 1,
            header,
            header + 1,
            50,
            header + max as usize,
        ] {
            let name = format!("z{zeros}.log");
            let mut b = bytes.clone();
            b.resize(b.len() + zeros, 0);
            fs::write(dir.path().join(&name), &b).expect("write");
            let s = scan(&storage, Path::new(&name), small).expect("scan");
            assert_eq!(entries_of(&s), batches);
            assert_eq!(
                s.end,
                LogEnd::TornTail {
                    offset: end,
                    len: zeros as u64
                }
            );
            let w = LogWriter::open(&storage, Path::new(&name), small).expect("open");
            assert_eq!(w.end(), end);
        }
        // More zeros than one record can hold cannot be a torn record.
        let name = "zmany.log";
        let mut b = bytes.clone();
        b.resize(b.len() + header + max as usize + 1, 0);
        fs::write(dir.path().join(name), &b).expect("write");
        let s = scan(&storage, Path::new(name), small).expect("scan");
        assert_eq!(
            s.end,
            LogEnd::Damaged {
                offset: end,
                damage: Damage::HeaderChecksum {
                    valid_record_at: None
                }
            }
        );
        let err = LogWriter::open(&storage, Path::new(name), small).expect_err("cut damage");
        assert!(
            matches!(err, Error::Corrupt { offset, .. } if offset == end),
            "{err}"
        );
        assert_eq!(fs::read(dir.path().join(name)).expect("read"), b);
    }
}

#[test]
fn flipped_byte_in_an_earlier_record_is_damage_at_its_offset() {
    for framing in FRAMINGS {
        let (dir, storage) = store();
        let (bytes, bounds, batches) = small_log_of(dir.path(), &storage, framing);
        let shown = storage.display(Path::new("flip.log"));
        // Every byte of every record but the last.
        for rec in 0..bounds.len() - 2 {
            for pos in bounds[rec]..bounds[rec + 1] {
                let mut b = bytes.clone();
                b[pos as usize] ^= 0x01;
                fs::write(dir.path().join("flip.log"), &b).expect("write");
                let at = bounds[rec];

                let s = scan_ok(&storage, "flip.log");
                assert_eq!(entries_of(&s), &batches[..rec], "flip at {pos}");
                assert!(
                    matches!(s.end, LogEnd::Damaged { offset, .. } if offset == at),
                    "flip at {pos}: {:?}",
                    s.end
                );

                // The reader yields the records before it, then the damage.
                let reader =
                    LogReader::open(&storage, Path::new("flip.log"), LogOptions::default())
                        .expect("open");
                let items: Vec<_> = reader.records().expect("walk").collect();
                assert_eq!(items.len(), rec + 1);
                let err = items
                    .into_iter()
                    .last()
                    .expect("item")
                    .expect_err("damage skipped");
                assert!(
                    matches!(err, Error::Corrupt { offset, .. } if offset == at),
                    "{err}"
                );

                // The writer refuses, names file and offset, and cuts nothing.
                let err = LogWriter::open(&storage, Path::new("flip.log"), LogOptions::default())
                    .expect_err("writer accepted damage");
                let msg = err.to_string();
                assert!(err.is_corruption(), "{msg}");
                assert!(msg.contains(&shown.display().to_string()), "{msg}");
                assert!(msg.contains(&format!("offset {at}")), "{msg}");
                assert_eq!(fs::read(dir.path().join("flip.log")).expect("read"), b);
            }
        }
    }
}

#[test]
fn flipped_byte_in_the_last_record_reads_as_a_torn_tail() {
    for framing in FRAMINGS {
        // Documented ambiguity: a damaged last record looks like a torn write.
        let (dir, storage) = store();
        let (bytes, bounds, batches) = small_log_of(dir.path(), &storage, framing);
        let last = bounds[bounds.len() - 2];
        for pos in last..bytes.len() as u64 {
            let mut b = bytes.clone();
            b[pos as usize] ^= 0x80;
            fs::write(dir.path().join("flip.log"), &b).expect("write");
            let s = scan_ok(&storage, "flip.log");
            assert_eq!(entries_of(&s), &batches[..batches.len() - 1]);
            assert_eq!(
                s.end,
                LogEnd::TornTail {
                    offset: last,
                    len: bytes.len() as u64 - last
                },
                "flip at {pos}"
            );
            let w = open_writer(&storage, "flip.log");
            assert_eq!(w.cut_tail().map(|c| c.offset), Some(last));
        }
    }
}

#[test]
fn damaged_file_header_is_refused() {
    for framing in FRAMINGS {
        let (dir, storage) = store();
        let (bytes, _, _) = small_log_of(dir.path(), &storage, framing);
        for pos in 0..16 {
            let mut b = bytes.clone();
            b[pos] ^= 0x04;
            fs::write(dir.path().join("h.log"), &b).expect("write");
            let err =
                scan(&storage, Path::new("h.log"), LogOptions::default()).expect_err("accepted");
            assert!(err.is_corruption(), "{err}");
            assert!(LogWriter::open(&storage, Path::new("h.log"), LogOptions::default()).is_err());
            assert_eq!(fs::read(dir.path().join("h.log")).expect("read"), b);
        }
        let mut b = bytes.clone();
        b[8] = 3;
        let crc = crc32fast::hash(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        fs::write(dir.path().join("v3.log"), &b).expect("write");
        let err = scan(&storage, Path::new("v3.log"), LogOptions::default()).expect_err("accepted");
        assert!(
            matches!(err, Error::Unsupported { version: 3, .. }),
            "{err}"
        );
    }
}

/// A record header of `framing` with a valid checksum claiming `len`
/// payload (version 2: heads) bytes.
fn header_claiming(framing: Framing, len: u32) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&len.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    if framing == Framing::V2 {
        h.extend_from_slice(&[0u8; 8]);
    }
    let crc = crc32fast::hash(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

#[test]
fn record_claiming_a_huge_length_is_refused_without_reading_it() {
    for framing in FRAMINGS {
        let (dir, storage) = store();
        let (bytes, bounds, batches) = small_log_of(dir.path(), &storage, framing);
        let end = *bounds.last().expect("nonempty");
        for claim in [u32::MAX, u32::MAX - 3, DEFAULT_MAX_RECORD_SIZE + 1] {
            let mut b = bytes.clone();
            b.extend_from_slice(&header_claiming(framing, claim));
            b.extend_from_slice(b"some bytes");
            fs::write(dir.path().join("huge.log"), &b).expect("write");
            let s = scan_ok(&storage, "huge.log");
            assert_eq!(entries_of(&s), batches);
            assert_eq!(
                s.end,
                LogEnd::Damaged {
                    offset: end,
                    damage: Damage::TooLarge {
                        size: claim.into(),
                        max: DEFAULT_MAX_RECORD_SIZE.into()
                    }
                }
            );
            let err = LogWriter::open(&storage, Path::new("huge.log"), LogOptions::default())
                .expect_err("accepted");
            assert!(
                matches!(err, Error::RecordTooLarge { offset: Some(o), size, .. } if o == end && size == u64::from(claim)),
                "{err}"
            );
            assert_eq!(fs::read(dir.path().join("huge.log")).expect("read"), b);
        }
    }
}

#[test]
fn batch_over_the_limit_is_refused_on_append() {
    let (_dir, storage) = store();
    let opts = LogOptions {
        max_record_size: 100,
    };
    let mut w = LogWriter::create(&storage, Path::new(LOG), opts).expect("create");
    // 4 (count) + 4 (length) + 92 = 100 bytes: exactly the limit.
    w.append(&[vec![7u8; 92]]).expect("at the limit");
    let end = w.end();
    let err = w.append(&[vec![7u8; 93]]).expect_err("over the limit");
    assert!(
        matches!(
            err,
            Error::RecordTooLarge {
                offset: None,
                size: 101,
                max: 100,
                ..
            }
        ),
        "{err}"
    );
    assert!(!w.is_poisoned());
    assert_eq!(w.end(), end);
    w.append(&[b"small"]).expect("append after refusal");
    drop(w);
    let s = scan(&storage, Path::new(LOG), opts).expect("scan");
    assert_eq!(s.records.len(), 2);
    // A reader with a smaller limit refuses the record instead of reading it.
    let tiny = LogOptions {
        max_record_size: 50,
    };
    let s = scan(&storage, Path::new(LOG), tiny).expect("scan");
    assert!(matches!(
        s.end,
        LogEnd::Damaged {
            damage: Damage::TooLarge { size: 100, .. },
            ..
        }
    ));
}

#[test]
fn incremental_reads_return_only_what_was_appended_since() {
    for framing in FRAMINGS {
        let (_dir, storage) = store();
        let mut w = create(&storage, LOG, framing, LogOptions::default());
        let reader =
            LogReader::open(&storage, Path::new(LOG), LogOptions::default()).expect("open");
        let mut pos = FIRST_RECORD;
        let mut seen = Vec::new();
        for round in 0..4u32 {
            for i in 0..round {
                append(&mut w, &batch(2, round * 10 + i, false)).expect("append");
            }
            let mut walk = reader.records_from(pos).expect("walk");
            let new: Vec<_> = walk
                .by_ref()
                .map(|r| batch_of(&r.expect("record")))
                .collect();
            assert_eq!(new.len() as u32, round);
            assert_eq!(walk.end(), Some(&LogEnd::Clean { offset: w.end() }));
            pos = walk.position();
            assert_eq!(pos, w.end());
            seen.extend(new);
        }
        assert_eq!(entries_of(&scan_ok(&storage, LOG)), seen);
        // An offset beyond the end is not silently accepted.
        let err = reader.records_from(w.end() + 1).expect_err("beyond end");
        assert!(err.is_corruption(), "{err}");
        assert!(reader.records_from(3).is_err());
    }
}

#[test]
fn a_reader_opened_once_reads_what_a_reader_reads_as_of_its_open() {
    for framing in FRAMINGS {
        let (_dir, storage) = store();
        let mut w = create(&storage, LOG, framing, LogOptions::default());
        let records = |r: &LogReader| -> Vec<Vec<Vec<u8>>> {
            r.records()
                .expect("walk")
                .map(|r| batch_of(&r.expect("record")))
                .collect()
        };
        // Short (read whole at its open), then past the size read whole.
        for (i, big) in [(1u32, false), (2, false), (5, true), (8, true)] {
            append(&mut w, &batch(3, i, big)).expect("append");
            let mut once = LogReader::open_once(&storage, Path::new(LOG), LogOptions::default())
                .expect("once");
            let mut plain =
                LogReader::open(&storage, Path::new(LOG), LogOptions::default()).expect("open");
            assert_eq!(once.format(), plain.format());
            assert_eq!(
                records(&once),
                records(&plain),
                "{framing:?} after batch {i}"
            );
            // What is appended after its open: not in the copy a short log's
            // reader read (its first `take_file`), but in a walk and a
            // second look, which read the file.
            let short = w.end() <= super::reader::READ_WHOLE_UP_TO;
            append(&mut w, &batch(3, i + 100, false)).expect("append");
            let now = plain.take_file().expect("read").0;
            let first = once.take_file().expect("read").0;
            if short {
                assert_ne!(first, now);
                assert_eq!(first[..], now[..first.len()]);
            } else {
                assert_eq!(first, now);
            }
            assert_eq!(once.take_file().expect("read").0, now);
            assert_eq!(records(&once), records(&plain));
        }
        assert!(
            w.end() > super::reader::READ_WHOLE_UP_TO,
            "both sizes were read"
        );
    }
}

#[test]
fn a_long_log_is_read_in_two_halves_as_it_is_on_disk() {
    let (dir, storage) = store();
    let mut w = create(&storage, LOG, Framing::V2, LogOptions::default());
    let mut i = 0;
    while w.end() <= super::reader::READ_IN_HALVES as u64 + 4096 {
        i += 1;
        append(&mut w, &batch(5, i, true)).expect("append");
    }
    let on_disk = fs::read(dir.path().join(LOG)).expect("read the file");
    let file = storage.open(Path::new(LOG)).expect("open");
    let len = on_disk.len() as u64;
    // The whole file, an odd length, and more than there is (a file that
    // shrank since its length was taken: what there is).
    for asked in [len, len - 1, len - 4097, len + 1, len * 2] {
        let read = super::reader::read_up_to(&*file, asked).expect("read");
        let want = &on_disk[..(asked.min(len) as usize)];
        assert_eq!(read.len(), want.len(), "asked {asked} of {len}");
        assert!(read == want, "asked {asked} of {len}: the file's bytes");
    }
    let mut reader =
        LogReader::open(&storage, Path::new(LOG), LogOptions::default()).expect("open");
    assert_eq!(
        reader.take_file().expect("read"),
        (on_disk.clone(), on_disk.len() as u64)
    );
}

#[test]
fn try_open_does_not_wait_for_a_held_lock() {
    let (_dir, storage) = store();
    let w = LogWriter::create(&storage, Path::new(LOG), LogOptions::default()).expect("create");
    let other = LogWriter::try_open(&storage, Path::new(LOG), LogOptions::default()).expect("try");
    assert!(other.is_none(), "two writers hold the lock");
    drop(w);
    let other = LogWriter::try_open(&storage, Path::new(LOG), LogOptions::default()).expect("try");
    assert!(other.is_some());
}

/// Checks that `scan` holds each expected batch whole, exactly once.
fn assert_each_batch_once(scan: &Scan, expected: &[(u8, u32)], big: bool) {
    let mut seen = BTreeSet::new();
    for r in &scan.records {
        let entries = batch_of(r);
        let name = String::from_utf8(entries[0].clone()).expect("utf8");
        let (tag, i) = name.split_once(':').expect("tag:i");
        let (tag, i): (u8, u32) = (tag.parse().expect("tag"), i.parse().expect("i"));
        assert_eq!(entries, batch(tag, i, big), "batch {name} not whole");
        assert!(seen.insert((tag, i)), "batch {name} twice");
    }
    let want: BTreeSet<_> = expected.iter().copied().collect();
    assert_eq!(seen, want);
    assert!(matches!(scan.end, LogEnd::Clean { .. }), "{:?}", scan.end);
}

/// Appends `n` batches tagged `tag`, each with its own writer handle, so the
/// lock changes hands between batches and every writer re-reads the tail.
fn append_with_fresh_writers(storage: &dyn Backend, tag: u8, n: u32) {
    for i in 0..n {
        let mut w = open_writer(storage, LOG);
        w.append(&batch(tag, i, false)).expect("append");
    }
}

#[test]
fn writers_in_threads_append_every_batch_once() {
    let (_dir, storage) = store();
    drop(LogWriter::create(&storage, Path::new(LOG), LogOptions::default()).expect("create"));
    let n = 40;
    std::thread::scope(|s| {
        for tag in 1..=3u8 {
            let storage = &storage;
            s.spawn(move || append_with_fresh_writers(storage, tag, n));
        }
    });
    let expected: Vec<_> = (1..=3u8)
        .flat_map(|t| (0..n).map(move |i| (t, i)))
        .collect();
    assert_each_batch_once(&scan_ok(&storage, LOG), &expected, false);
}

const CHILD_ENV: &str = "JPSTORE_LOG_TEST_CHILD";

#[test]
fn writers_in_processes_append_every_batch_once() {
    let n = 30;
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        // Child: "<tag>:<dir>".
        let (tag, dir) = spec.split_once(':').expect("child spec");
        let storage = FileBackend::new(Arc::new(LocalStorage::open(dir).expect("storage")));
        append_with_fresh_writers(&storage, tag.parse().expect("tag"), n);
        return;
    }
    let (dir, storage) = store();
    drop(LogWriter::create(&storage, Path::new(LOG), LogOptions::default()).expect("create"));
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = [1u8, 2]
        .iter()
        .map(|tag| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "log::tests::writers_in_processes_append_every_batch_once",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, format!("{tag}:{}", dir.path().display()))
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    append_with_fresh_writers(&storage, 3, n);
    for mut child in children {
        assert!(child.wait().expect("wait").success(), "child failed");
    }
    let expected: Vec<_> = (1..=3u8)
        .flat_map(|t| (0..n).map(move |i| (t, i)))
        .collect();
    let s = scan_ok(&storage, LOG);
    assert_each_batch_once(&s, &expected, false);
}

#[test]
fn reader_concurrent_with_a_writer_sees_only_whole_batches() {
    for framing in FRAMINGS {
        let (_dir, storage) = store();
        let mut w = create(&storage, LOG, framing, LogOptions::default());
        let n = 120u32;
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..n {
                    append(&mut w, &batch(5, i, true)).expect("append");
                }
                done.store(true, Ordering::Release);
            });
            let reader =
                LogReader::open(&storage, Path::new(LOG), LogOptions::default()).expect("open");
            let mut pos = FIRST_RECORD;
            let mut next = 0u32;
            loop {
                let finished = done.load(Ordering::Acquire);
                let mut walk = reader.records_from(pos).expect("walk");
                for r in walk.by_ref() {
                    let r = r.expect("a reader saw damage while a writer appended");
                    assert_eq!(batch_of(&r), batch(5, next, true), "batch {next} not whole");
                    next += 1;
                }
                assert!(
                    matches!(
                        walk.end(),
                        Some(LogEnd::Clean { .. } | LogEnd::TornTail { .. })
                    ),
                    "{:?}",
                    walk.end()
                );
                pos = walk.position();
                if finished {
                    break;
                }
            }
            assert_eq!(next, n);
        });
    }
}

/// A [`LocalStorage`] whose `sync_data` fails while `fail` is set, and whose
/// next `garble` reads return one flipped byte (a read racing a writer).
#[derive(Debug, Default)]
struct Faults {
    fail: AtomicBool,
    garble: AtomicUsize,
}

#[derive(Debug)]
struct FailingSync {
    inner: LocalStorage,
    faults: Arc<Faults>,
}

#[derive(Debug)]
struct FailingFile {
    inner: Box<dyn StorageFile>,
    faults: Arc<Faults>,
}

impl StorageFile for FailingFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        let garble = &self.faults.garble;
        if n > 0 && garble.load(Ordering::SeqCst) > 0 {
            garble.fetch_sub(1, Ordering::SeqCst);
            buf[n / 2] ^= 0xff;
        }
        Ok(n)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.inner.write_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.faults.fail.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected EIO"));
        }
        self.inner.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn lock(&self, kind: LockKind, wait: bool) -> io::Result<bool> {
        self.inner.lock(kind, wait)
    }
    fn unlock(&self) -> io::Result<()> {
        self.inner.unlock()
    }
    fn set_modified(&self, time: SystemTime) -> io::Result<()> {
        self.inner.set_modified(time)
    }
    fn file_id(&self) -> io::Result<FileId> {
        self.inner.file_id()
    }
}

impl Storage for FailingSync {
    fn display_path(&self, path: &Path) -> PathBuf {
        self.inner.display_path(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        Ok(Box::new(FailingFile {
            inner: self.inner.open(path, mode)?,
            faults: self.faults.clone(),
        }))
    }
    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        self.inner.metadata(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.read_dir(path)
    }
    fn file_id(&self, path: &Path) -> io::Result<FileId> {
        self.inner.file_id(path)
    }
    fn link_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.link_noreplace(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn map(&self, path: &Path) -> io::Result<Mapping> {
        self.inner.map(path)
    }
}

#[test]
fn failed_sync_poisons_the_writer_for_good() {
    let (dir, _) = store();
    let faults = Arc::new(Faults::default());
    let fail = &faults.fail;
    let storage = FileBackend::new(Arc::new(FailingSync {
        inner: LocalStorage::open(dir.path()).expect("storage"),
        faults: faults.clone(),
    }));
    let mut w = LogWriter::create(&storage, Path::new(LOG), LogOptions::default()).expect("create");
    w.append(&[b"durable"]).expect("append");
    let end = w.end();
    fail.store(true, Ordering::SeqCst);
    let err = w
        .append(&[b"unknown"])
        .expect_err("sync failure acknowledged");
    assert!(matches!(err, Error::SyncFailed { .. }), "{err}");
    // Even once syncs work again, the handle never retries or acknowledges.
    fail.store(false, Ordering::SeqCst);
    for _ in 0..2 {
        let err = w.append(&[b"later"]).expect_err("poisoned writer appended");
        assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    }
    assert!(w.is_poisoned());
    assert_eq!(w.end(), end);
    drop(w);
    // A new writer starts from what is on disk: the unsynced batch is
    // whole (it reached the page cache) or absent, never partial.
    let mut w = open_writer(&storage, LOG);
    w.append(&[b"after reopen"]).expect("append");
    drop(w);
    let got = entries_of(&scan_ok(&storage, LOG));
    assert_eq!(got.first(), Some(&vec![b"durable".to_vec()]));
    assert_eq!(got.last(), Some(&vec![b"after reopen".to_vec()]));
    assert!(got.len() == 2 || got[1] == vec![b"unknown".to_vec()]);
}

#[test]
fn reader_confirms_damage_before_reporting_it() {
    for framing in FRAMINGS {
        let (dir, inner) = store();
        let (_, _, batches) = small_log_of(dir.path(), &inner, framing);
        let faults = Arc::new(Faults::default());
        let storage = FileBackend::new(Arc::new(FailingSync {
            inner: LocalStorage::open(dir.path()).expect("storage"),
            faults: faults.clone(),
        }));
        let reader =
            LogReader::open(&storage, Path::new(LOG), LogOptions::default()).expect("open");
        // The first look at the records is garbled, as when a writer cut a torn
        // tail and appended over it during the read: not reported as damage.
        faults.garble.store(1, Ordering::SeqCst);
        let mut walk = reader.records().expect("walk");
        let got: Vec<_> = walk
            .by_ref()
            .map(|r| batch_of(&r.expect("transient damage reported")))
            .collect();
        assert_eq!(got, batches);
        assert!(matches!(walk.end(), Some(LogEnd::Clean { .. })));
        // Damage that is still there on the second look is reported.
        faults.garble.store(2, Ordering::SeqCst);
        let items: Vec<_> = reader.records().expect("walk").collect();
        assert!(items
            .iter()
            .any(|r| r.as_ref().is_err_and(Error::is_corruption)));
    }
}

/// A part of a generated version 1 log.
#[derive(Debug, Clone)]
enum Part {
    Record(Vec<Vec<u8>>),
    Garbage(Vec<u8>),
    Zeros(usize),
}

fn part() -> impl proptest::strategy::Strategy<Value = Part> {
    use proptest::prelude::*;
    prop_oneof![
        6 => proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..4)
            .prop_map(Part::Record),
        1 => proptest::collection::vec(any::<u8>(), 1..60).prop_map(Part::Garbage),
        1 => (1usize..400).prop_map(Part::Zeros),
    ]
}

/// Every step of a walk of `bytes` in memory, taken as the first bytes of a
/// file of `len`.
fn steps(bytes: &[u8], len: u64, max: u32, proven_end: u64) -> Vec<String> {
    let mut walker = Walker::in_memory(bytes, len, Framing::V1, max).with_proven_end(proven_end);
    let mut out = Vec::new();
    let mut pos = FIRST_RECORD;
    loop {
        match walker.step(pos).expect("in memory") {
            Step::Record { header, .. } => {
                out.push(format!("record at {pos}"));
                pos += header.record_len();
            }
            Step::End(end) => {
                out.push(format!("{end:?}"));
                return out;
            }
        }
    }
}

proptest::proptest! {
    /// A long log is read for a walk only as far as one can go, and the
    /// walk of what was read is the walk of the whole file.
    #[test]
    fn a_walk_of_what_is_read_for_it_is_the_walk_of_the_whole_file(
        parts in proptest::collection::vec(part(), 0..20),
        cut in 0usize..30,
        max in 16u32..200,
        chunk in 1u64..300,
        proven in 0usize..2000,
    ) {
        let mut bytes = record::encode_file_header(LogFormat::v1(0)).to_vec();
        for p in &parts {
            match p {
                Part::Record(entries) => bytes.extend_from_slice(&record::encode_record(entries)),
                Part::Garbage(g) => bytes.extend_from_slice(g),
                Part::Zeros(n) => bytes.resize(bytes.len() + n, 0),
            }
        }
        // Sometimes a torn tail.
        bytes.truncate(bytes.len() - cut.min(bytes.len() - 16));
        let len = bytes.len() as u64;
        let options = LogOptions { max_record_size: max };
        let file = super::reader::ReadOnce { bytes: bytes.clone() };
        let (read, read_len) =
            super::reader::read_for_walk_in(&file, len, Framing::V1, options, 0, chunk)
                .expect("read");
        proptest::prop_assert_eq!(read_len, len);
        proptest::prop_assert_eq!(&read[..], &bytes[..read.len()]);
        let proven = (proven as u64).min(len);
        let whole = steps(&bytes, len, max, proven);
        proptest::prop_assert_eq!(steps(&read, len, max, proven), whole.clone());
        // Read: the records a walk finds, a record's worth, and a chunk.
        let mut end = FIRST_RECORD;
        let mut walker = Walker::in_memory(&bytes, len, Framing::V1, max);
        while let Step::Record { header, .. } = walker.step(end).expect("in memory") {
            end += header.record_len();
        }
        proptest::prop_assert!(
            read.len() as u64 <= end + 12 + u64::from(max) + 1 + chunk + 12,
            "{} bytes read of {len}, records end at {end}", read.len()
        );
    }
}

#[test]
fn a_long_log_is_read_up_to_a_record_after_its_first_bad_header() {
    let max = 100;
    let options = LogOptions {
        max_record_size: max,
    };
    let mut bytes = record::encode_file_header(LogFormat::v1(0)).to_vec();
    bytes.extend_from_slice(&record::encode_record(&[b"first"]));
    let bad = bytes.len() as u64;
    // A damaged header, then a valid record ending exactly a record's
    // worth after it: what tells damage from a torn tail.
    bytes.extend_from_slice(&[0x5a; 12]);
    let entry = vec![7u8; 80];
    bytes.extend_from_slice(&record::encode_record(&[&entry]));
    assert_eq!(bytes.len() as u64 - bad, 12 + u64::from(max));
    let len = bytes.len() as u64;
    let file = super::reader::ReadOnce {
        bytes: bytes.clone(),
    };
    let (read, _) =
        super::reader::read_for_walk_in(&file, len, Framing::V1, options, 0, 1).expect("read");
    let whole = steps(&bytes, len, max, 0);
    assert!(
        whole
            .last()
            .is_some_and(|s| s.contains("valid_record_at: Some")),
        "{whole:?}"
    );
    assert_eq!(steps(&read, len, max, 0), whole);
    // Gigabytes after it are never read.
    let sparse = super::reader::ReadOnce {
        bytes: [&bytes[..], &vec![0; 1 << 20]].concat(),
    };
    let (read, read_len) = super::reader::read_for_walk_in(
        &sparse,
        sparse.bytes.len() as u64,
        Framing::V1,
        options,
        0,
        1,
    )
    .expect("read");
    assert_eq!(read_len, sparse.bytes.len() as u64);
    assert!(read.len() as u64 <= bad + 12 + u64::from(max) + 1);
    // A file that shrank since its length was taken (a writer cut a torn
    // tail): what is there, and that is its length.
    let (read, read_len) =
        super::reader::read_for_walk_in(&file, len + 1000, Framing::V1, options, 0, 1)
            .expect("read");
    assert_eq!((read.len() as u64, read_len), (len, len));
}

/// A log in memory that sets `flag` once a read reaches `trip`: an
/// interrupt arriving while a walk is inside the bytes after it.
#[derive(Debug)]
struct Tripwire {
    bytes: Vec<u8>,
    trip: u64,
    flag: Arc<AtomicBool>,
}

impl jpstore_blobstore::backend::ObjectReader for Tripwire {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset + buf.len() as u64 > self.trip {
            self.flag.store(true, Ordering::SeqCst);
        }
        let start = (offset as usize).min(self.bytes.len());
        let n = buf.len().min(self.bytes.len() - start);
        buf[..n].copy_from_slice(&self.bytes[start..start + n]);
        Ok(n)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }
}

/// A log of `framing` with one record, then `tail` bytes of no record (a
/// bad header, zeros with stray bytes): what a reader searches after the
/// bad header, and gc's walk byte after byte. Returns the log and where
/// the tail starts.
fn log_with_a_long_tail(framing: Framing, tail: usize) -> (Vec<u8>, u64) {
    let format = match framing {
        Framing::V1 => LogFormat::v1(0),
        Framing::V2 => LogFormat::v2(),
    };
    let mut bytes = record::encode_file_header(format).to_vec();
    bytes.extend(match framing {
        Framing::V1 => record::encode_record(&[b"first"]),
        Framing::V2 => record::encode_record_v2(&[0u8; 16], b""),
    });
    let start = bytes.len() as u64;
    bytes.resize(bytes.len() + tail, 0x5a);
    for i in (start as usize + 64..bytes.len()).step_by(97) {
        bytes[i] = 0;
    }
    (bytes, start)
}

#[test]
fn an_interrupt_stops_the_search_after_a_bad_header_inside_the_search() {
    for framing in FRAMINGS {
        // A tail a search walks offset by offset (within the record limit).
        // The flag is set by the read of the whole tail for the search, not
        // by the reads ahead before it (64 KiB at a time).
        let (bytes, tail) = log_with_a_long_tail(framing, 4 << 20);
        let flag = Arc::new(AtomicBool::new(false));
        let file = Tripwire {
            bytes,
            trip: tail + (256 << 10),
            flag: Arc::clone(&flag),
        };
        let reader = LogReader::over(Box::new(file), PathBuf::from(LOG), LogOptions::default())
            .expect("open");
        let before = search_work().offsets;
        let mut walk = reader.records().expect("walk").interruptible(&flag);
        assert!(walk.next().expect("a record").is_ok());
        assert!(matches!(walk.next(), Some(Err(Error::Interrupted))));
        assert!(walk.next().is_none());
        let looked = search_work().offsets - before;
        assert!(
            looked > 0 && looked <= 2 << 16,
            "{looked} offsets looked at in a search of 4 MiB"
        );
    }
}

#[test]
fn an_interrupt_stops_gcs_walk_inside_a_long_damaged_region() {
    for framing in FRAMINGS {
        let (bytes, tail) = log_with_a_long_tail(framing, 16 << 20);
        let flag = Arc::new(AtomicBool::new(false));
        let file = Tripwire {
            bytes,
            trip: tail,
            flag: Arc::clone(&flag),
        };
        let before = search_work().offsets;
        let walked = salvage::salvage_file(
            &file,
            file.bytes.len() as u64,
            FIRST_RECORD,
            framing,
            LogOptions {
                max_record_size: 1 << 20,
            },
            salvage::STEP,
            Some(&flag),
            &mut |_| {},
        );
        let e = walked.expect_err("interrupted");
        assert!(matches!(
            read_error("read", PathBuf::from(LOG), e),
            Error::Interrupted
        ));
        let looked = search_work().offsets - before;
        assert!(
            looked <= 2 << 20,
            "{looked} offsets looked at in a region of 16 MiB"
        );
    }
}

/// A record whose bytes do not say what they are (cut short, or its
/// checksum not that of its header) is never appended: the writer stops
/// with a panic before writing, rather than framing damage itself.
#[test]
fn a_record_not_framed_as_it_says_is_never_appended() {
    let (_dir, storage) = store();
    for framing in FRAMINGS {
        let name = format!("{framing:?}.log");
        let mut w = create(&storage, &name, framing, LogOptions::default());
        let record = match framing {
            Framing::V1 => FramedRecord::batch(&batch(1, 2, false), u32::MAX),
            Framing::V2 => {
                let (heads, body) = split_of(&batch(1, 2, false));
                FramedRecord::split(&heads, &body, u32::MAX)
            }
        }
        .expect("framed");
        let mut cut = record.clone();
        cut.bytes.pop();
        let mut wrong_crc = record.clone();
        wrong_crc.record_crc ^= 1;
        for bad in [cut, wrong_crc] {
            let appended =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| w.append_framed(&bad)));
            assert!(appended.is_err(), "{framing:?}: appended {bad:?}");
        }
        // Nothing was written: the writer goes on at the same end.
        let end = w.end();
        assert_eq!(w.append_framed(&record).expect("append"), end);
        assert_eq!(scan_ok(&storage, &name).records.len(), 1);
    }
}
