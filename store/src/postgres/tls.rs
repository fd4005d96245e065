//! TLS to PostgreSQL: rustls, chosen when the URL says `sslmode=require`,
//! verifying the server's certificate against the system's roots and, if
//! given, a CA file of the operator's.

use rustls::RootCertStore;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio_postgres::Socket;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{PgOptions, redact};
use crate::{Result, StoreError};

/// A connector keel can open connections, pools and listeners with.
pub trait Connector: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static {}

impl<T: MakeTlsConnect<Socket> + Clone + Send + Sync + 'static> Connector for T {}

/// The TLS connector the URL asks for, or `None` for plain connections
/// (`sslmode=disable`, or `prefer`, libpq's default; connections over a Unix
/// socket never use TLS).
pub(super) fn connector(options: &PgOptions) -> Result<Option<MakeRustlsConnect>> {
    let unavailable = |reason: String| StoreError::Unavailable {
        location: redact(&options.url),
        reason,
    };
    let config: tokio_postgres::Config = options
        .url
        .parse()
        .map_err(|e| unavailable(format!("the URL does not parse: {e}")))?;
    if config.get_ssl_mode() != SslMode::Require {
        return Ok(None);
    }
    let mut roots = RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = &options.ca_cert {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| unavailable(format!("the CA file `{}`: {e}", path.display())))?;
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| unavailable(format!("the CA file `{}`: {e}", path.display())))?;
        }
    }
    if roots.is_empty() {
        return Err(unavailable(
            "TLS is required but no CA certificate is trusted: give a CA file".into(),
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| unavailable(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}
