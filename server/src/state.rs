//! The state every handler reaches.

use std::sync::Arc;

use keel_host::Keel;

use crate::metrics::Metrics;

/// What every handler reaches.
#[derive(Clone)]
pub struct AppState {
    pub keel: Keel,
    pub metrics: Arc<Metrics>,
    pub auth: crate::auth::Auth,
}
