//! Which store `--db` names and how the CLI opens it in process: sled or
//! PostgreSQL, and on a full disk, a copy of a sled store to read.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use keel_host::store::postgres::{PgOptions, PgStore};
use keel_host::store::sled::SledOptions;
use keel_host::{Config, Keel};

use crate::args::Cli;
use crate::config;
use crate::remote::Client;

/// Where the store is.
pub(crate) enum Db {
    /// The embedded store in this directory.
    Sled(PathBuf),
    /// A PostgreSQL database.
    Postgres(PgOptions),
}

impl Db {
    pub(crate) fn of(cli: &Cli) -> Db {
        if cli.db.starts_with("postgres://") || cli.db.starts_with("postgresql://") {
            let mut options = PgOptions::new(&cli.db);
            options.schema = cli.pg_schema.clone();
            options.pool_size = cli.pg_pool_size;
            options.statement_timeout = std::time::Duration::from_secs(cli.pg_statement_timeout);
            options.ca_cert = cli.pg_ca_cert.clone();
            Db::Postgres(options)
        } else {
            Db::Sled(PathBuf::from(&cli.db))
        }
    }
}

/// Opens the engine over the store `--db` names.
pub(crate) async fn open(cli: &Cli) -> anyhow::Result<Keel> {
    open_with(cli, config(cli)?).await
}

/// Opens the engine over the store `--db` names with `config`.
pub(crate) async fn open_with(cli: &Cli, config: Config) -> anyhow::Result<Keel> {
    Ok(match Db::of(cli) {
        Db::Sled(_) => Keel::open_sled(config, &sled_options(cli))?,
        Db::Postgres(options) => {
            let store = PgStore::open(options)
                .await
                .map_err(keel_host::Error::from)?;
            Keel::open(config, Arc::new(store))?
        }
    })
}

/// The sled store `--db` names, with its free-space reserve and cache.
pub(crate) fn sled_options(cli: &Cli) -> SledOptions {
    SledOptions {
        min_free_bytes: cli.min_free_mib << 20,
        cache_bytes: cli.sled_cache_mib << 20,
        ..SledOptions::new(&cli.db)
    }
}

/// Opening a sled store writes, so on a full disk it fails; a command
/// that only reads is answered from a copy of the store in the temporary
/// directory (without its compiled components), deleted with the client.
pub(crate) async fn read_a_copy(cli: &Cli, path: &Path) -> anyhow::Result<Client> {
    let copy = std::env::temp_dir().join(format!("keel-read-{}", std::process::id()));
    let opened = async {
        copy_store(path, &copy).with_context(|| {
            format!(
                "the disk holding the store is full, and a copy to read could not be made in {}",
                copy.display()
            )
        })?;
        eprintln!(
            "the disk holding {} is full: answering from a copy of the store in {} (nothing is written to the store)",
            path.display(),
            copy.display()
        );
        let options = SledOptions {
            path: copy.clone(),
            min_free_bytes: 0,
            ..sled_options(cli)
        };
        let keel = Keel::open_sled(Config::caching_in(copy.join("compiled")), &options)?;
        Client::in_process(keel, false).await
    }
    .await;
    match opened {
        Ok(client) => Ok(client.deleting(copy)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&copy);
            Err(e)
        }
    }
}

/// Copies the sled store at `from` to `to`, leaving out what is not the
/// store's data: compiled components and the worker's control socket.
pub(crate) fn copy_store(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "compiled" || name == "control" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type()?.is_dir() {
            copy_store(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
