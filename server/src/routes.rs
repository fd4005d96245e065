//! The API's route table: every endpoint's path, method, OpenAPI
//! operation and handler (each resource's handlers are in its own module),
//! and the answer to a path no route serves.

use crate::error::ApiError;
use crate::state::AppState;

/// An endpoint of the API: its path, method, OpenAPI operation and
/// handler. [`table`] lists every one; the router is built from it and a
/// test checks it against the OpenAPI document, both ways.
pub struct Route {
    pub path: &'static str,
    /// The method `handler` takes.
    pub method: axum::http::Method,
    /// Its `operationId` in `/openapi.json` (read by the document's test).
    #[allow(dead_code)]
    pub operation: &'static str,
    pub handler: axum::routing::MethodRouter<AppState>,
    /// Anyone may call it: the token check lets it through (the health
    /// check, and deliveries to webhooks, whose signatures the engine
    /// checks).
    pub public: bool,
}

/// Every endpoint of the API (the console's pages are the console's).
pub fn table() -> Vec<Route> {
    use crate::{deployments, events, hooks, jobs, limits, operations, runs, schedules, streams};
    use axum::http::Method;
    use axum::routing::{delete, get, post, put};
    let route = |path, method: Method, operation, handler| Route {
        path,
        method,
        operation,
        handler,
        public: false,
    };
    vec![
        Route {
            public: true,
            ..route("/healthz", Method::GET, "health", get(operations::health))
        },
        route("/metrics", Method::GET, "metrics", get(operations::metrics)),
        route(
            "/openapi.json",
            Method::GET,
            "openapi",
            get(crate::console::openapi),
        ),
        route(
            "/v1/deployments",
            Method::GET,
            "listDeployments",
            get(deployments::deployments),
        ),
        route(
            "/v1/deployments",
            Method::POST,
            "deploy",
            post(deployments::deploy),
        ),
        route(
            "/v1/deployments/{name}",
            Method::GET,
            "getDeployment",
            get(deployments::deployment),
        ),
        route(
            "/v1/deployments/{name}/component",
            Method::GET,
            "inspectDeployment",
            get(deployments::deployment_component),
        ),
        route(
            "/v1/deployments/{name}/grants",
            Method::POST,
            "grantDeployment",
            post(deployments::grant),
        ),
        route(
            "/v1/deployments/{name}/upgrade",
            Method::POST,
            "upgradeDeployment",
            post(jobs::upgrade),
        ),
        route(
            "/v1/workflows/{workflow}/runs",
            Method::POST,
            "startRun",
            post(runs::start),
        ),
        route("/v1/runs", Method::GET, "listRuns", get(runs::list_runs)),
        route(
            "/v1/runs/bulk",
            Method::POST,
            "bulkRuns",
            post(jobs::submit),
        ),
        route("/v1/jobs", Method::GET, "listJobs", get(jobs::list)),
        route("/v1/jobs/{job_id}", Method::GET, "getJob", get(jobs::get)),
        route(
            "/v1/jobs/{job_id}/cancel",
            Method::POST,
            "cancelJob",
            post(jobs::cancel),
        ),
        route("/v1/limits", Method::GET, "listLimits", get(limits::list)),
        route(
            "/v1/limits/{workflow}",
            Method::POST,
            "setLimit",
            post(limits::set),
        ),
        route(
            "/v1/limits/{workflow}/reset",
            Method::POST,
            "resetLimit",
            post(limits::reset),
        ),
        route(
            "/v1/runs/{run_id}",
            Method::GET,
            "getRun",
            get(runs::get_run),
        ),
        route(
            "/v1/runs/{run_id}",
            Method::DELETE,
            "deleteRun",
            delete(runs::delete_run),
        ),
        route(
            "/v1/store/stats",
            Method::GET,
            "storeStats",
            get(operations::store_stats),
        ),
        route(
            "/v1/store/purge",
            Method::POST,
            "purgeStore",
            post(operations::purge),
        ),
        route(
            "/v1/components/prune",
            Method::POST,
            "pruneComponents",
            post(operations::prune_components),
        ),
        route(
            "/v1/runs/{run_id}/detail",
            Method::GET,
            "getRunDetail",
            get(runs::run_detail),
        ),
        route(
            "/v1/runs/{run_id}/journal",
            Method::GET,
            "getJournal",
            get(runs::journal),
        ),
        route(
            "/v1/runs/{run_id}/result",
            Method::GET,
            "getResult",
            get(runs::result),
        ),
        route(
            "/v1/runs/{run_id}/cancel",
            Method::POST,
            "cancelRun",
            post(runs::cancel),
        ),
        route(
            "/v1/runs/{run_id}/retry",
            Method::POST,
            "retryRun",
            post(runs::retry),
        ),
        route(
            "/v1/runs/{run_id}/restart",
            Method::POST,
            "restartRun",
            post(runs::restart),
        ),
        route(
            "/v1/runs/{run_id}/fork",
            Method::POST,
            "forkRun",
            post(runs::fork),
        ),
        route(
            "/v1/runs/{run_id}/pause",
            Method::POST,
            "pauseRun",
            post(runs::pause),
        ),
        route(
            "/v1/runs/{run_id}/resume",
            Method::POST,
            "resumeRun",
            post(runs::resume),
        ),
        route(
            "/v1/runs/{run_id}/queries",
            Method::GET,
            "listQueries",
            get(crate::queries::list),
        ),
        route(
            "/v1/runs/{run_id}/queries/{name}",
            Method::GET,
            "queryRun",
            get(crate::queries::get),
        ),
        route(
            "/v1/runs/{run_id}/events",
            Method::GET,
            "runEvents",
            get(runs::run_events),
        ),
        route(
            "/v1/hooks",
            Method::GET,
            "listHooks",
            get(hooks::list_hooks),
        ),
        route(
            "/v1/hooks/{token}",
            Method::GET,
            "getHook",
            get(hooks::get_hook),
        ),
        route(
            "/v1/hooks/{token}/resume",
            Method::POST,
            "resumeHook",
            post(hooks::resume),
        ),
        route(
            "/v1/hooks/{token}/replies/{payload_id}",
            Method::GET,
            "getReply",
            get(hooks::get_reply),
        ),
        route(
            "/v1/runs/{run_id}/streams",
            Method::GET,
            "listStreams",
            get(streams::list_streams),
        ),
        route(
            "/v1/runs/{run_id}/streams/{name}",
            Method::GET,
            "followStream",
            get(streams::follow_stream),
        ),
        route(
            "/v1/events",
            Method::GET,
            "listEvents",
            get(events::list_events),
        ),
        route(
            "/v1/events/{key}",
            Method::POST,
            "pushEvent",
            post(events::push_event),
        ),
        route(
            "/v1/workers",
            Method::GET,
            "listWorkers",
            get(operations::workers),
        ),
        route(
            "/v1/webhooks",
            Method::GET,
            "listWebhooks",
            get(crate::webhooks::list),
        ),
        route(
            "/v1/webhooks",
            Method::POST,
            "createWebhook",
            post(crate::webhooks::create),
        ),
        route(
            "/v1/webhooks/{id}",
            Method::GET,
            "getWebhook",
            get(crate::webhooks::get),
        ),
        route(
            "/v1/webhooks/{id}",
            Method::DELETE,
            "deleteWebhook",
            delete(crate::webhooks::delete),
        ),
        Route {
            public: true,
            ..route(
                "/v1/webhooks/{id}",
                Method::POST,
                "deliverWebhook",
                post(crate::webhooks::deliver),
            )
        },
        route(
            "/v1/tokens",
            Method::POST,
            "createToken",
            post(crate::tokens::create),
        ),
        route(
            "/v1/schedules",
            Method::GET,
            "listSchedules",
            get(schedules::list),
        ),
        route(
            "/v1/schedules",
            Method::POST,
            "createSchedule",
            post(schedules::create),
        ),
        route(
            "/v1/schedules/{name}",
            Method::GET,
            "getSchedule",
            get(schedules::get),
        ),
        route(
            "/v1/schedules/{name}",
            Method::PUT,
            "updateSchedule",
            put(schedules::update),
        ),
        route(
            "/v1/schedules/{name}",
            Method::DELETE,
            "deleteSchedule",
            delete(schedules::delete),
        ),
        route(
            "/v1/schedules/{name}/pause",
            Method::POST,
            "pauseSchedule",
            post(schedules::pause),
        ),
        route(
            "/v1/schedules/{name}/resume",
            Method::POST,
            "resumeSchedule",
            post(schedules::resume),
        ),
        route(
            "/v1/schedules/{name}/trigger",
            Method::POST,
            "triggerSchedule",
            post(schedules::trigger),
        ),
        route(
            "/v1/schedules/{name}/backfill",
            Method::POST,
            "backfillSchedule",
            post(schedules::backfill),
        ),
    ]
}

/// Any other path.
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        keel_core::ErrorKind::NotFound,
        format!(
            "no endpoint at `{}`; the API is described at /openapi.json",
            uri.path()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document describes exactly the routes the router serves, each
    /// under its operation ID.
    #[test]
    fn every_route_is_documented_and_every_documented_operation_is_routed() {
        let doc = crate::openapi::document();
        let paths = doc["paths"].as_object().unwrap();
        let routes = table();
        for route in &routes {
            let method = route.method.as_str().to_ascii_lowercase();
            let operation = &paths
                .get(route.path)
                .unwrap_or_else(|| panic!("{} is not in /openapi.json", route.path))[&method];
            assert_eq!(
                operation["operationId"], route.operation,
                "{} {}: {operation}",
                route.method, route.path
            );
        }
        for (path, operations) in paths {
            for method in operations.as_object().unwrap().keys() {
                assert!(
                    routes
                        .iter()
                        .any(|r| r.path == path && r.method.as_str().eq_ignore_ascii_case(method)),
                    "/openapi.json documents {method} {path}, which no route serves"
                );
            }
        }
    }
}
