//! The on-disk cache of compiled components: one artifact per component
//! and engine, compiled once however many processes load it at the same
//! time, and bounded in size.
//!
//! Safety: compiled artifacts are native code that wasmtime loads without
//! verifying it (`Component::deserialize` is `unsafe`). The cache directory
//! is therefore created `0700`, must belong to the current user and must
//! not be writable by others, and an artifact is loaded only if it belongs
//! to the current user, is writable by no one else and matches the digest
//! recorded beside it when it was compiled; otherwise keel refuses the
//! directory or compiles afresh.
//!
//! Concurrency: the compile of an artifact is serialised by an advisory
//! lock on a file beside it, so processes that load the same component at
//! once (the tests, or several workers started together) compile it once
//! and the others read what the first wrote.
//!
//! Size: an artifact's modification time is its last use (a load touches
//! it). After a compile writes a new artifact, the least recently used
//! ones are deleted until the cache holds at most [`MAX_CACHE_BYTES`].

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::{Error, Result};

/// The most a cache directory holds after a compile (2 GiB: about fifty
/// compiled Python components, or hundreds of Rust ones).
pub const MAX_CACHE_BYTES: u64 = 2 << 30;

/// The artifact's bytes at `artifact`, loaded by `load` from the cache or,
/// when the cache has no trustworthy copy, compiled by `compile`, written
/// to the cache and loaded. `load` refusing a cached copy (an artifact of
/// another wasmtime) also compiles afresh.
pub(crate) fn load_or_compile<T, E>(
    artifact: &Path,
    load: impl Fn(&[u8]) -> std::result::Result<T, E>,
    compile: impl FnOnce() -> std::result::Result<Vec<u8>, E>,
) -> Result<std::result::Result<T, E>> {
    let dir = artifact.parent().unwrap_or(Path::new("."));
    ensure_private_dir(dir)?;
    let hit = |artifact: &Path| {
        let bytes = verified_artifact(artifact)?;
        let loaded = load(&bytes).ok()?;
        touch(artifact);
        Some(loaded)
    };
    if let Some(loaded) = hit(artifact) {
        return Ok(Ok(loaded));
    }
    // Another process may be compiling it: wait for it, then look again.
    let _lock = lock(artifact);
    if let Some(loaded) = hit(artifact) {
        return Ok(Ok(loaded));
    }
    let compiled = match compile() {
        Ok(compiled) => compiled,
        Err(e) => return Ok(Err(e)),
    };
    let digest = hex::encode(Sha256::digest(&compiled));
    let written = write_artifact(artifact, &compiled)
        .and_then(|()| write_artifact(&digest_path(artifact), digest.as_bytes()));
    match written {
        Ok(()) => evict(dir, artifact, MAX_CACHE_BYTES),
        Err(e) => {
            tracing::warn!(path = %artifact.display(), error = %e, "could not cache the compiled component; it will be compiled again next time");
        }
    }
    Ok(load(&compiled))
}

/// An exclusive advisory lock on `ARTIFACT.lock`, released when dropped;
/// `None` (and no waiting) if the lock file cannot be opened or locked.
fn lock(artifact: &Path) -> Option<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(artifact.with_extension("cwasm.lock"))
        .ok()?;
    file.lock().ok()?;
    Some(file)
}

/// Marks `artifact` used now (its modification time), so eviction keeps it.
fn touch(artifact: &Path) {
    let file = std::fs::OpenOptions::new().write(true).open(artifact);
    if let Ok(file) = file {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Deletes the least recently used artifacts of `dir` (with their digests
/// and lock files) until the artifacts take at most `cap` bytes, keeping
/// `keep` whatever its size.
fn evict(dir: &Path, keep: &Path, cap: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let artifacts: Vec<Cached> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some(Cached {
                path: e.path(),
                bytes: meta.len(),
                used: meta.modified().ok()?,
            })
        })
        .collect();
    for victim in victims(artifacts, keep, cap) {
        tracing::info!(path = %victim.display(), "evicting a compiled component not used lately");
        for path in [
            digest_path(&victim),
            victim.with_extension("cwasm.lock"),
            victim,
        ] {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// An artifact in the cache: its size and when it was last used.
#[derive(Debug, Clone)]
struct Cached {
    path: PathBuf,
    bytes: u64,
    used: SystemTime,
}

/// Which of `artifacts` to delete, least recently used first, so the rest
/// take at most `cap` bytes; `keep` is never chosen.
fn victims(mut artifacts: Vec<Cached>, keep: &Path, cap: u64) -> Vec<PathBuf> {
    let mut total: u64 = artifacts.iter().map(|a| a.bytes).sum();
    artifacts.sort_by_key(|a| a.used);
    let mut chosen = Vec::new();
    for a in artifacts {
        if total <= cap {
            break;
        }
        if a.path != keep {
            total -= a.bytes;
            chosen.push(a.path);
        }
    }
    chosen
}

/// Where the digest of an artifact, recorded when it was compiled, is kept.
fn digest_path(artifact: &Path) -> PathBuf {
    artifact.with_extension("cwasm.sha256")
}

/// The cached artifact's bytes, if it and its digest are this user's
/// alone and the bytes match the digest recorded when they were compiled;
/// otherwise `None` (and a warning if an artifact was there), so the
/// component is compiled again.
fn verified_artifact(artifact: &Path) -> Option<Vec<u8>> {
    let digest = digest_path(artifact);
    if !is_trusted_file(artifact) || !is_trusted_file(&digest) {
        return None;
    }
    let recorded = std::fs::read_to_string(&digest).ok()?;
    let compiled = std::fs::read(artifact).ok()?;
    if hex::encode(Sha256::digest(&compiled)) != recorded.trim() {
        tracing::warn!(path = %artifact.display(), "a cached compiled component does not match the digest recorded when it was compiled; compiling it again");
        return None;
    }
    Some(compiled)
}

/// Writes a compiled artifact under a name unique to this process and call,
/// then renames it into place, so concurrent loaders (threads or processes
/// sharing the cache) never see or clobber a half-written file.
fn write_artifact(artifact: &Path, compiled: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp: PathBuf = artifact.with_extension(format!("{}.{n}.tmp", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?
        .write_all(compiled)?;
    std::fs::rename(&tmp, artifact).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Creates `dir` (mode 0700) or checks that it belongs to this user and is
/// writable by no one else: native code is loaded from it.
fn ensure_private_dir(dir: &Path) -> Result<()> {
    let unsafe_cache = |reason: String| Error::UnsafeCache {
        path: dir.to_path_buf(),
        reason,
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) => return Err(unsafe_cache(format!("it cannot be created ({e})"))),
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| unsafe_cache(format!("it cannot be read ({e})")))?;
    if !meta.is_dir() {
        return Err(unsafe_cache("it is not a directory".into()));
    }
    if meta.uid() != current_uid() {
        return Err(unsafe_cache(format!(
            "it belongs to user {}, not to this user ({})",
            meta.uid(),
            current_uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(unsafe_cache(format!(
            "others can write to it (mode {:o})",
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// A cached artifact keel may load: a regular file of this user's that no
/// one else can write.
fn is_trusted_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| m.is_file() && m.uid() == current_uid() && m.mode() & 0o022 == 0)
}

/// The effective user ID of this process.
fn current_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn the_cache_is_created_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/compiled");
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_cache_others_can_write_is_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = ensure_private_dir(root.path()).unwrap_err();
        assert_eq!(err.kind().as_str(), "unsafe_cache");
        assert!(err.to_string().contains("others can write"), "{err}");
    }

    #[test]
    fn only_private_artifacts_are_trusted() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("x.cwasm");
        write_artifact(&file, b"bytes").unwrap();
        assert!(is_trusted_file(&file));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(!is_trusted_file(&file));
        assert!(!is_trusted_file(&root.path().join("missing")));
    }

    fn cached(name: &str, bytes: u64, age_s: u64) -> Cached {
        Cached {
            path: PathBuf::from(name),
            bytes,
            used: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 - age_s),
        }
    }

    #[test]
    fn eviction_takes_the_least_recently_used_until_under_the_cap() {
        let all = vec![
            cached("new", 40, 1),
            cached("oldest", 40, 300),
            cached("old", 40, 200),
            cached("mid", 40, 100),
        ];
        assert_eq!(
            victims(all.clone(), Path::new("new"), 200),
            Vec::<PathBuf>::new()
        );
        assert_eq!(
            victims(all.clone(), Path::new("new"), 100),
            ["oldest", "old"].map(PathBuf::from)
        );
        // The one just written stays even when it alone is over the cap.
        assert_eq!(
            victims(all, Path::new("new"), 10),
            ["oldest", "old", "mid"].map(PathBuf::from)
        );
    }

    #[test]
    fn threads_loading_one_artifact_at_once_compile_it_once() {
        let root = tempfile::tempdir().unwrap();
        let artifact = root.path().join("c/x.cwasm");
        let compiles = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let got = load_or_compile(
                        &artifact,
                        |b| Ok::<_, ()>(b.to_vec()),
                        || {
                            compiles.fetch_add(1, Ordering::SeqCst);
                            Ok(b"native".to_vec())
                        },
                    );
                    assert_eq!(got.unwrap().unwrap(), b"native");
                });
            }
        });
        assert_eq!(compiles.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_tampered_artifact_is_compiled_again() {
        let root = tempfile::tempdir().unwrap();
        let artifact = root.path().join("x.cwasm");
        let compile = |b: &'static [u8]| move || Ok::<_, ()>(b.to_vec());
        load_or_compile(&artifact, |b| Ok::<_, ()>(b.to_vec()), compile(b"one"))
            .unwrap()
            .unwrap();
        std::fs::write(&artifact, b"evil").unwrap();
        let got = load_or_compile(&artifact, |b| Ok::<_, ()>(b.to_vec()), compile(b"two"));
        assert_eq!(got.unwrap().unwrap(), b"two");
    }
}
