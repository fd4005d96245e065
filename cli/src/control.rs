//! The private socket on which the `keel worker` holding a sled store
//! serves keel's API to its user's CLI ([`crate::remote`]): the same router
//! `keel serve` serves over TCP, in a directory only that user can enter.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use keel_host::Keel;
use tokio::net::UnixListener;

/// The socket a worker listens on: in a directory of the store's that only
/// its owner can enter, so the socket is never reachable by other users,
/// not even between its creation and its chmod.
pub fn socket_path(db: &Path) -> PathBuf {
    db.join("control").join("control.sock")
}

/// Creates the socket's directory (mode 0700) or makes it 0700.
fn private_socket_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path.parent().expect("the socket has a directory");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Serves the API on the store's socket until the task is dropped: the
/// same router `keel serve` serves over TCP, for the store's owner alone.
pub async fn serve(
    keel: Keel,
    db: &Path,
    metrics: Arc<keel_server::Metrics>,
) -> anyhow::Result<()> {
    let path = socket_path(db);
    // This process holds the store's lock, so a socket left here is stale.
    let _ = std::fs::remove_file(&path);
    private_socket_dir(&path)?;
    let listener = UnixListener::bind(&path)?;
    // Only the store's owner may drive its runs.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    tracing::info!(path = %path.display(), "serving the API to this user's CLI");
    let app = keel_server::private_router(keel, metrics).await?;
    keel_server::serve_socket(listener, app).await?;
    Ok(())
}
