//! What steps may reach: the operator's grants (HTTP hosts, directories,
//! environment variables) and the policy that enforces the HTTP grant.

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime_wasi_http::WasiHttpHooks;

use crate::effects::{Effect, StepGate};

/// The capabilities the operator grants to steps. Nothing by default.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    /// Hosts (`host` or `host:port`) steps may send HTTP requests to.
    pub http: Vec<String>,
    /// Host directories preopened for steps, at the same path in the guest.
    pub dirs: Vec<PathBuf>,
    /// Environment variables passed to steps, with their values.
    pub env: Vec<(String, String)>,
}

impl Grants {
    /// Recorded grants as the sandbox takes them: environment variables
    /// get this process's values (a variable it lacks is left out, with a
    /// warning).
    pub fn of(spec: &keel_core::GrantSpec) -> Grants {
        let env = spec
            .env
            .iter()
            .filter_map(|name| match std::env::var(name) {
                Ok(value) => Some((name.clone(), value)),
                Err(_) => {
                    tracing::warn!(
                        name,
                        "a granted environment variable is not set in this worker"
                    );
                    None
                }
            })
            .collect();
        Grants {
            http: spec.http.clone(),
            dirs: spec.dirs.iter().map(Into::into).collect(),
            env,
        }
    }

    /// These grants as a deployment records them (the environment
    /// variables by name: a worker passes its own values).
    pub fn spec(&self) -> keel_core::GrantSpec {
        keel_core::GrantSpec {
            http: self.http.clone(),
            dirs: self.dirs.iter().map(|d| d.display().to_string()).collect(),
            env: self.env.iter().map(|(name, _)| name.clone()).collect(),
        }
    }
}

/// Outbound HTTP limited to the granted hosts.
pub(super) struct HttpGrant {
    /// `host` or `host:port` entries.
    pub(super) allowed: Vec<String>,
    /// The `host:port` of each request denied, so that a failed attempt
    /// can say which grant it lacked.
    pub(super) denied: Vec<String>,
    /// The step attempt's effect gate, passed before a request leaves.
    pub(super) gate: Option<Arc<dyn StepGate>>,
}

impl HttpGrant {
    fn permits(&self, uri: &http::Uri) -> bool {
        let Some(host) = uri.host() else { return false };
        let port = uri.port_u16();
        self.allowed
            .iter()
            .any(|grant| match grant.rsplit_once(':') {
                Some((h, p)) if p.parse::<u16>().is_ok() => {
                    h == host && (port.map(|x| x.to_string()).as_deref() == Some(p))
                }
                _ => grant == host,
            })
    }
}

type SendFuture = Box<
    dyn Future<
            Output = wasmtime_wasi_http::Result<(
                http::Response<wasmtime_wasi_http::WasiBody>,
                Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
            )>,
        > + Send,
>;

impl WasiHttpHooks for HttpGrant {
    fn send_request(
        &mut self,
        mut request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> SendFuture {
        if !self.permits(request.uri()) {
            tracing::warn!(uri = %request.uri(), "step HTTP request denied: the host is not granted to this component's steps");
            let uri = request.uri();
            let host = uri.host().unwrap_or("?");
            self.denied.push(match uri.port_u16() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_string(),
            });
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        // The service called joins the run's trace (unless the step names
        // a trace of its own).
        if !request.headers().contains_key("traceparent")
            && let Some(value) = crate::trace::current_traceparent()
            && let Ok(value) = http::HeaderValue::from_str(&value)
        {
            request.headers_mut().insert("traceparent", value);
        }
        let gate = self.gate.clone();
        Box::new(async move {
            use http_body_util::BodyExt;
            if let Some(gate) = gate {
                gate.before(Effect::StepHttpRequest)
                    .await
                    .map_err(|e| wasmtime_wasi_http::Error::InternalError(Some(e.to_string())))?;
            }
            let (res, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                res.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(allowed: &[&str]) -> HttpGrant {
        HttpGrant {
            allowed: allowed.iter().map(|s| s.to_string()).collect(),
            denied: Vec::new(),
            gate: None,
        }
    }

    fn uri(s: &str) -> http::Uri {
        s.parse().unwrap()
    }

    #[test]
    fn a_host_grant_allows_any_port_and_nothing_else() {
        let g = grant(&["api.example"]);
        assert!(g.permits(&uri("https://api.example/charge")));
        assert!(g.permits(&uri("http://api.example:8080/x")));
        assert!(!g.permits(&uri("https://api.example.evil/x")));
        assert!(!g.permits(&uri("https://other/x")));
    }

    #[test]
    fn a_host_and_port_grant_allows_that_port_only() {
        let g = grant(&["127.0.0.1:9000"]);
        assert!(g.permits(&uri("http://127.0.0.1:9000/charge")));
        assert!(!g.permits(&uri("http://127.0.0.1:9001/charge")));
        assert!(!g.permits(&uri("http://127.0.0.1/charge")));
    }

    #[test]
    fn nothing_is_granted_by_default() {
        assert!(!grant(&[]).permits(&uri("http://localhost/")));
        assert!(!grant(&["localhost"]).permits(&uri("/relative")));
    }
}
