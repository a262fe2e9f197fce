use std::os::unix::fs::symlink;

use super::*;

fn refused(result: io::Result<Vec<u8>>, says: &str) {
    match result {
        Ok(bytes) => panic!(
            "read {} bytes, expected an error saying {says:?}",
            bytes.len()
        ),
        Err(e) => assert!(e.to_string().contains(says), "{e} (expected {says:?})"),
    }
}

#[test]
fn anything_but_a_regular_file_is_refused_before_a_byte_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A FIFO with no writer: opened without blocking, then refused.
    let fifo_path = dir.path().join("fifo");
    crate::storage::mkfifo(&fifo_path);
    refused(
        read(&fifo_path, 1 << 20, LastLink::Follow),
        "a FIFO, not a regular file",
    );
    refused(
        read(Path::new("/dev/zero"), 1 << 20, LastLink::Follow),
        "a character device, not a regular file",
    );
    refused(read(dir.path(), 1 << 20, LastLink::Follow), "a directory");
    refused(
        read(&dir.path().join("missing"), 1 << 20, LastLink::Follow),
        "No such file",
    );
}

#[test]
fn sizes_over_the_limit_are_refused_before_reading() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big");
    // A sparse file claiming far more than could be read here.
    let file = File::create(&path).expect("create");
    file.set_len(1 << 40).expect("set_len");
    refused(
        read(&path, 1 << 30, LastLink::Follow),
        "1099511627776 bytes, more than the limit of 1073741824 bytes",
    );
    std::fs::write(&path, b"12345").expect("write");
    assert_eq!(
        read(&path, 5, LastLink::Follow).expect("at the limit"),
        b"12345"
    );
    refused(
        read(&path, 4, LastLink::Follow),
        "more than the limit of 4 bytes",
    );
}

#[test]
fn streams_are_bounded() {
    assert_eq!(read_stream(&b"abc"[..], 3).expect("at the limit"), b"abc");
    let endless = io::repeat(0);
    refused(
        read_stream(endless, 1 << 20),
        "more than the limit of 1048576 bytes",
    );
}

#[test]
fn a_link_at_the_end_is_followed_or_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("target");
    std::fs::write(&target, b"content").expect("write");
    let link = dir.path().join("link");
    symlink(&target, &link).expect("symlink");
    assert_eq!(
        read(&link, 100, LastLink::Follow).expect("followed"),
        b"content"
    );
    refused(read(&link, 100, LastLink::Refuse), "a symbolic link");
}
