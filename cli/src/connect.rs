//! Which of keel's APIs a command's calls go to: `--server`'s; the one the
//! `keel worker` holding a sled store serves on its socket; or, when this
//! process can open the store, the same API served in this process over it
//! (on a full disk, over a copy of it, for a command that only reads).

use std::sync::Arc;

use keel_host::Keel;
use keel_host::store::StoreError;

use crate::args::Cli;
use crate::db::{Db, open_with, read_a_copy, sled_options};
use crate::remote::Client;
use crate::{config, control, progress, refuse_missing_store, shows_progress};

/// The client of the API that answers for `--db` (or `--server`);
/// `reads_only` when the command only reads, so a copy of a store on a full
/// disk answers it as the store would.
pub async fn connect(cli: &Cli, reads_only: bool) -> anyhow::Result<Client> {
    refuse_missing_store(cli)?;
    if let Some(server) = &cli.server {
        return Client::new(server, cli.api_token.as_deref());
    }
    let mut config = config(cli)?;
    // No worker: a run nobody waits for is left to the next one.
    config.background_drives = false;
    if shows_progress(cli) {
        config.observer = Arc::new(progress::Progress);
    }
    let Db::Sled(path) = Db::of(cli) else {
        // Any number of processes share a PostgreSQL store.
        let keel = open_with(cli, config).await?;
        return Client::in_process(keel, false).await;
    };
    match Keel::open_sled(config, &sled_options(cli)) {
        Ok(keel) => Client::in_process(keel, true).await,
        Err(locked @ keel_host::Error::Store(StoreError::Locked { .. })) => {
            let socket = control::socket_path(&path);
            match tokio::net::UnixStream::connect(&socket).await {
                Ok(_) => Ok(Client::socket(&socket)),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    // The process holding the store is another than a worker.
                    tracing::warn!(path = %socket.display(), "removing the socket of a worker that is gone");
                    let _ = std::fs::remove_file(&socket);
                    Err(locked.into())
                }
                Err(_) => Err(locked.into()),
            }
        }
        Err(keel_host::Error::Store(StoreError::StorageFull { .. })) if reads_only => {
            read_a_copy(cli, &path).await
        }
        Err(e) => Err(e.into()),
    }
}
