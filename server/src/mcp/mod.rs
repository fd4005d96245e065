//! The Model Context Protocol endpoint, `/mcp` (Streamable HTTP, served
//! by the `rmcp` SDK): agents reach the deployed workflows as tools and
//! runs as resources, behind the API's authentication.
//!
//! - Every workflow a start reaches (the latest deployment exporting it)
//!   is a tool ([`catalog`]): its input schema is the workflow's, its
//!   description the workflow's doc comment. A call starts a run and
//!   answers with it once it has ended or waits on something (a hook: the
//!   answer names the hook and its payload schema); the chunks its
//!   streams get meanwhile come as progress notifications ([`calls`]).
//! - `keel-resume-hook` answers a run's hook and waits for the reply;
//!   `keel-await-run` waits for a run.
//! - Runs and their streams are resources ([`resources`]), which a
//!   client reads and subscribes to.
//! - A scoped token reaches what its scope names and nothing else: one
//!   workflow's tool, one hook, one run.

mod calls;
mod catalog;
mod resources;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use keel_core::access::Scope;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorCode, ErrorData, Implementation,
    ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ResourceUpdatedNotification,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, ServerNotification,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use tokio::task::AbortHandle;

use crate::auth::Scoped;
use crate::state::AppState;

/// What the server tells a client on connecting.
const INSTRUCTIONS: &str = "Each workflow tool starts a durable run and answers once the run has ended or waits on something. A run waiting on a hook names the hook's token and payload schema: answer it with `keel-resume-hook`. `keel-await-run` waits for a run; `keel://runs/{run_id}` reads one. Pass `_meta.\"keel/idempotency_key\"` to make a retried call find the run the first one started.";

/// The endpoint over `state`, for the router to serve at
/// [`MCP_PATH`](crate::MCP_PATH). Hosts
/// and origins are the router's guard's to check; sessions (of clients
/// on protocol versions before 2026-07-28) live in this process.
pub(crate) fn service(state: AppState) -> StreamableHttpService<KeelMcp, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_max_request_body_bytes(crate::MAX_BODY);
    StreamableHttpService::new(
        move || Ok(KeelMcp::new(state.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The MCP server of one session (or one request, when stateless).
#[derive(Clone)]
pub(crate) struct KeelMcp {
    state: AppState,
    /// The session's `resources/subscribe` subscriptions.
    subscriptions: Arc<Subscriptions>,
}

impl KeelMcp {
    fn new(state: AppState) -> Self {
        KeelMcp {
            state,
            subscriptions: Arc::default(),
        }
    }
}

/// A session's subscriptions, by URI: each a task telling the client of
/// the resource's changes. They stop with the session.
#[derive(Default)]
struct Subscriptions(Mutex<HashMap<String, AbortHandle>>);

impl Subscriptions {
    /// Keeps `task` as `uri`'s subscription, stopping the one it replaces.
    fn insert(&self, uri: String, task: AbortHandle) {
        if let Some(old) = self.lock().insert(uri, task) {
            old.abort();
        }
    }

    /// Stops `uri`'s subscription, if any.
    fn remove(&self, uri: &str) {
        if let Some(task) = self.lock().remove(uri) {
            task.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AbortHandle>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        for task in self.lock().values() {
            task.abort();
        }
    }
}

impl ServerHandler for KeelMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new("keel", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = catalog::tools(&self.state.keel, scope(&context).as_ref()).await?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        calls::call(&self.state, request, &context)
            .await
            .map(Into::into)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        resources::read(&self.state, &request.uri, scope(&context).as_ref())
            .await
            .map(Into::into)
    }

    /// `subscriptions/listen` (2026-07-28): the keel resources asked for.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let asked = requested
            .resource_subscriptions
            .as_deref()
            .unwrap_or_default();
        Some(
            SubscriptionFilter::builder()
                .resource_subscriptions(resources::known(asked))
                .build(),
        )
    }

    /// Tells the client of each change of the resources it listens to,
    /// until it stops listening or none can change again.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let scope = scope(context.request_context());
        for uri in &uris {
            resources::check(uri, scope.as_ref())?;
        }
        let mut changes = std::pin::pin!(resources::changes(&self.state.keel, &uris).await?);
        loop {
            tokio::select! {
                _ = context.cancelled() => return Ok(()),
                changed = changes.next() => {
                    let Some(uri) = changed else { return Ok(()) };
                    if context.sink().send(updated(uri)).await.is_err() {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// `resources/subscribe` (sessions before 2026-07-28).
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        resources::check(&request.uri, scope(&context).as_ref())?;
        let uris = [request.uri.clone()];
        let changes = resources::changes(&self.state.keel, &uris).await?;
        let peer = context.peer.clone();
        let task = tokio::spawn(async move {
            let mut changes = std::pin::pin!(changes);
            while let Some(uri) = changes.next().await {
                let param = ResourceUpdatedNotificationParam::new(uri);
                if peer.notify_resource_updated(param).await.is_err() {
                    return;
                }
            }
        });
        self.subscriptions.insert(request.uri, task.abort_handle());
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.remove(&request.uri);
        Ok(())
    }
}

/// The notification that `uri` changed.
fn updated(uri: String) -> ServerNotification {
    ServerNotification::ResourceUpdatedNotification(ResourceUpdatedNotification::new(
        ResourceUpdatedNotificationParam::new(uri),
    ))
}

/// The scope of the token the request came with (`None`: the server's
/// token, or an open server), as the auth layer left it on the request.
fn scope(context: &RequestContext<RoleServer>) -> Option<Scope> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Scoped>())
        .map(|Scoped(claims)| claims.scope.clone())
}

/// The code of a request refused for its token's scope (in the range
/// JSON-RPC leaves to servers).
const FORBIDDEN: ErrorCode = ErrorCode(-32003);

/// A refusal of what `scope` does not cover, naming what it does.
fn forbidden(scope: &Scope, asked: &str) -> ErrorData {
    ErrorData::new(
        FORBIDDEN,
        format!(
            "this token may only {}; {asked} is outside its scope",
            scope.describe()
        ),
        None,
    )
}

/// An internal failure, told without its detail (which may name the
/// store's paths): the server's log has it.
fn internal(e: impl std::fmt::Display) -> ErrorData {
    tracing::warn!("an MCP request failed: {e}");
    ErrorData::internal_error("keel could not answer: the server's log says why", None)
}
