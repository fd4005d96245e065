//! Deployments: a component registered once under a name, with what its
//! steps may reach and the bounds they run under, and how a start that
//! names a workflow finds the deployment it runs on.

use serde::{Deserialize, Serialize};

use crate::ids::ComponentHash;

/// A component registered under a name: runs started on it are pinned to
/// its hash and their steps get its grants and limits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Deployment {
    /// The name starts refer to (by default the file's stem).
    pub name: String,
    /// The component's content hash; one deployment per hash.
    pub hash: ComponentHash,
    /// The workflows the component exports.
    pub workflows: Vec<String>,
    /// The steps the component exports.
    pub steps: Vec<String>,
    /// What its steps may reach.
    pub grants: GrantSpec,
    /// The bounds its steps run under; `None` takes the engine's.
    pub limits: StepLimits,
    /// The component's size in bytes.
    pub size_bytes: u64,
    /// When it was (last) deployed.
    pub deployed_at_ms: u64,
    /// How long its runs are kept once ended before any worker purges
    /// them; `None` takes the worker's default (which keeps them unless
    /// set). Every deployment of a name has the same.
    #[serde(default)]
    pub retention_ms: Option<u64>,
}

impl crate::codec::Stored for Deployment {
    const VERSION: u16 = 2;

    fn decode_earlier(version: u16, bytes: &[u8]) -> Option<Result<Self, postcard::Error>> {
        (version == 1).then(|| crate::codec::decode_layout::<DeploymentV1>(bytes).map(Into::into))
    }
}

/// A deployment as keel wrote it before `retention_ms` (layout 1).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DeploymentV1 {
    name: String,
    hash: ComponentHash,
    workflows: Vec<String>,
    steps: Vec<String>,
    grants: GrantSpec,
    limits: StepLimits,
    size_bytes: u64,
    deployed_at_ms: u64,
}

impl From<DeploymentV1> for Deployment {
    fn from(v1: DeploymentV1) -> Deployment {
        Deployment {
            name: v1.name,
            hash: v1.hash,
            workflows: v1.workflows,
            steps: v1.steps,
            grants: v1.grants,
            limits: v1.limits,
            size_bytes: v1.size_bytes,
            deployed_at_ms: v1.deployed_at_ms,
            retention_ms: None,
        }
    }
}

/// What an HTTP grant looks like (`host` or `host:port`): the characters
/// of host names (punycode for others), IP addresses and ports;
/// [`GrantSpec::check_http`] is the check.
pub const HTTP_GRANT_PATTERN: &str = r"^[A-Za-z0-9._:\[\]-]+$";

/// What a directory grant looks like: an absolute path.
pub const DIR_GRANT_PATTERN: &str = "^/";

/// What an environment variable grant looks like: a variable's name.
pub const ENV_GRANT_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

/// The capabilities granted to a deployment's steps, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(default)]
pub struct GrantSpec {
    /// Hosts (`host` or `host:port`) steps may send HTTP requests to.
    pub http: Vec<String>,
    /// Host directories preopened for steps, at the same path.
    pub dirs: Vec<String>,
    /// Names of environment variables passed to steps; the values are the
    /// worker's, never stored.
    pub env: Vec<String>,
}

impl GrantSpec {
    /// Nothing is granted.
    pub fn is_empty(&self) -> bool {
        self.http.is_empty() && self.dirs.is_empty() && self.env.is_empty()
    }

    /// Why an HTTP grant is malformed, if it is: a grant is `host` or
    /// `host:port`, never a URL.
    pub fn check_http(grant: &str) -> Result<(), String> {
        if grant.contains("://") || grant.contains('/') {
            return Err(format!(
                "`{grant}` is a URL; an HTTP grant is `host` or `host:port`, for example `api.example.com` or `127.0.0.1:9000`"
            ));
        }
        let host_char = |c: char| c.is_ascii_alphanumeric() || ".-_:[]".contains(c);
        if grant.is_empty() || !grant.chars().all(host_char) {
            return Err(format!(
                "`{grant}` is not a host name (letters, digits, `.`, `-`, `_`, an IP address, a `:port`)"
            ));
        }
        Ok(())
    }

    /// Why a grant is malformed, if one is: HTTP grants as
    /// [`GrantSpec::check_http`] says, directories absolute paths,
    /// environment variables names.
    pub fn check(&self) -> Result<(), String> {
        for grant in &self.http {
            GrantSpec::check_http(grant)?;
        }
        if let Some(dir) = self.dirs.iter().find(|d| !d.starts_with('/')) {
            return Err(format!(
                "`{dir}` is not an absolute path; a directory grant is one, such as `/srv/data`"
            ));
        }
        let is_name = |n: &str| {
            n.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if let Some(name) = self.env.iter().find(|n| !is_name(n)) {
            return Err(format!(
                "`{name}` is not an environment variable's name (letters, digits and `_`, not first a digit)"
            ));
        }
        Ok(())
    }

    /// These grants and `more`'s, each once, in the order first granted.
    pub fn with(&self, more: &GrantSpec) -> GrantSpec {
        let union = |a: &[String], b: &[String]| {
            let mut all = a.to_vec();
            for x in b {
                if !all.contains(x) {
                    all.push(x.clone());
                }
            }
            all
        };
        GrantSpec {
            http: union(&self.http, &more.http),
            dirs: union(&self.dirs, &more.dirs),
            env: union(&self.env, &more.env),
        }
    }
}

/// Bounds of a deployment's steps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StepLimits {
    /// Linear memory bound of a step instance, in MiB.
    pub max_memory_mib: Option<u64>,
    /// How long one step attempt may take, in milliseconds.
    pub step_timeout_ms: Option<u64>,
}

/// A step limit out of its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{field}` = {value} is out of range: it takes {min} to {max}")]
pub struct LimitOutOfRange {
    /// The [`StepLimits`] field.
    pub field: &'static str,
    pub value: u64,
    pub min: u64,
    pub max: u64,
}

impl StepLimits {
    /// The largest memory bound: a wasm32 memory holds at most 4 GiB.
    pub const MAX_MEMORY_MIB: u64 = 4096;
    /// The longest step timeout: 30 days.
    pub const MAX_STEP_TIMEOUT_MS: u64 = 30 * 24 * 3600 * 1000;

    /// Refuses a limit outside its range.
    pub fn check(&self) -> Result<(), LimitOutOfRange> {
        let within = |field, value: Option<u64>, max| match value {
            Some(value) if !(1..=max).contains(&value) => Err(LimitOutOfRange {
                field,
                value,
                min: 1,
                max,
            }),
            _ => Ok(()),
        };
        within("max_memory_mib", self.max_memory_mib, Self::MAX_MEMORY_MIB)?;
        within(
            "step_timeout_ms",
            self.step_timeout_ms,
            Self::MAX_STEP_TIMEOUT_MS,
        )
    }

    /// The memory bound in bytes, if set (in range once checked).
    pub fn max_memory_bytes(&self) -> Option<usize> {
        self.max_memory_mib
            .map(|mib| usize::try_from(mib.min(Self::MAX_MEMORY_MIB) << 20).unwrap_or(usize::MAX))
    }
}

/// Which deployment a start names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// The latest deployment exporting the workflow.
    Latest,
    /// The latest deployment under this name.
    Name(&'a str),
    /// The deployment of this component hash (or a unique prefix of it, at
    /// least 12 characters long).
    Hash(&'a str),
}

/// Why no deployment answers a start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No deployment exports the workflow.
    #[error("no deployment exports a workflow named `{workflow}`{}", known_list(.known))]
    UnknownWorkflow {
        workflow: String,
        /// The workflows the deployments export.
        known: Vec<String>,
    },
    /// No deployment has the name or hash.
    #[error("no deployment is named `{deployment}` or has that hash")]
    UnknownDeployment { deployment: String },
    /// The deployment does not export the workflow.
    #[error("deployment `{deployment}` ({hash}) exports no workflow named `{workflow}`{}", known_list(.known))]
    NotExported {
        deployment: String,
        hash: ComponentHash,
        workflow: String,
        known: Vec<String>,
    },
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "; nothing is deployed".into()
    } else {
        format!(" (deployed workflows: {})", known.join(", "))
    }
}

/// The deployment `target` names, among `deployments` (any order).
pub fn find<'a>(deployments: &'a [Deployment], target: Target<'_>) -> Option<&'a Deployment> {
    let newest = |it: &mut dyn Iterator<Item = &'a Deployment>| {
        it.max_by_key(|d| (d.deployed_at_ms, d.hash.as_str().to_owned()))
    };
    match target {
        Target::Latest => newest(&mut deployments.iter()),
        Target::Name(name) => newest(&mut deployments.iter().filter(|d| d.name == name)),
        Target::Hash(prefix) => {
            let mut matching = deployments.iter().filter(|d| {
                d.hash.as_str() == prefix || (prefix.len() >= 12 && d.hash.starts_with(prefix))
            });
            let first = matching.next()?;
            matching.next().is_none().then_some(first)
        }
    }
}

/// The deployment a start of `workflow` on `target` runs on.
pub fn resolve<'a>(
    deployments: &'a [Deployment],
    workflow: &str,
    target: Target<'_>,
) -> Result<&'a Deployment, ResolveError> {
    let exports = |d: &&Deployment| d.workflows.iter().any(|w| w == workflow);
    let found = match target {
        Target::Latest => {
            let exporting: Vec<_> = deployments.iter().filter(exports).cloned().collect();
            find(&exporting, Target::Latest)
                .and_then(|d| deployments.iter().find(|x| x.hash == d.hash))
        }
        Target::Name(_) | Target::Hash(_) => {
            let name = match target {
                Target::Name(n) | Target::Hash(n) => n,
                Target::Latest => unreachable!(),
            };
            let d = find(deployments, target).ok_or_else(|| ResolveError::UnknownDeployment {
                deployment: name.into(),
            })?;
            if !exports(&d) {
                return Err(ResolveError::NotExported {
                    deployment: d.name.clone(),
                    hash: d.hash.clone(),
                    workflow: workflow.into(),
                    known: d.workflows.clone(),
                });
            }
            Some(d)
        }
    };
    found.ok_or_else(|| {
        let mut known: Vec<String> = deployments
            .iter()
            .flat_map(|d| d.workflows.iter().cloned())
            .collect();
        known.sort();
        known.dedup();
        ResolveError::UnknownWorkflow {
            workflow: workflow.into(),
            known,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_added_are_kept_once_in_the_order_first_granted() {
        let had = GrantSpec {
            http: vec!["a:1".into(), "b".into()],
            dirs: vec![],
            env: vec!["KEY".into()],
        };
        let more = GrantSpec {
            http: vec!["b".into(), "c:2".into()],
            dirs: vec!["/data".into()],
            env: vec!["KEY".into()],
        };
        let both = had.with(&more);
        assert_eq!(both.http, ["a:1", "b", "c:2"]);
        assert_eq!(both.dirs, ["/data"]);
        assert_eq!(both.env, ["KEY"]);
        assert_eq!(had.with(&GrantSpec::default()), had);
    }

    #[test]
    fn malformed_grants_are_named() {
        let ok = GrantSpec {
            http: vec!["api.example.com:443".into()],
            dirs: vec!["/srv/data".into()],
            env: vec!["API_KEY".into()],
        };
        assert_eq!(ok.check(), Ok(()));
        let dir = GrantSpec {
            dirs: vec!["data".into()],
            ..GrantSpec::default()
        };
        assert!(
            dir.check()
                .unwrap_err()
                .contains("`data` is not an absolute path")
        );
        let env = GrantSpec {
            env: vec!["1X".into()],
            ..GrantSpec::default()
        };
        assert!(env.check().unwrap_err().contains("`1X`"));
        let url = GrantSpec {
            http: vec!["https://x".into()],
            ..GrantSpec::default()
        };
        assert!(url.check().unwrap_err().contains("is a URL"));
    }

    fn deployment(name: &str, hash: &str, workflows: &[&str], at: u64) -> Deployment {
        Deployment {
            name: name.into(),
            hash: ComponentHash::from(hash.to_string()),
            workflows: workflows.iter().map(|w| w.to_string()).collect(),
            steps: Vec::new(),
            grants: GrantSpec::default(),
            limits: StepLimits::default(),
            size_bytes: 0,
            deployed_at_ms: at,
            retention_ms: None,
        }
    }

    fn all() -> Vec<Deployment> {
        vec![
            deployment("order", "aaaaaaaaaaaaaaaa01", &["process_order"], 10),
            deployment(
                "order",
                "bbbbbbbbbbbbbbbb02",
                &["process_order", "refund"],
                20,
            ),
            deployment("billing", "cccccccccccccccc03", &["invoice"], 30),
        ]
    }

    #[test]
    fn deployments_written_before_retention_are_read_without_one() {
        let d = deployment("order", "aaaaaaaaaaaaaaaa01", &["process_order"], 10);
        let v1 = DeploymentV1 {
            name: d.name.clone(),
            hash: d.hash.clone(),
            workflows: d.workflows.clone(),
            steps: d.steps.clone(),
            grants: d.grants.clone(),
            limits: d.limits.clone(),
            size_bytes: d.size_bytes,
            deployed_at_ms: d.deployed_at_ms,
        };
        let bytes = postcard::to_stdvec(&(1u16, v1)).unwrap();
        let read: Deployment = crate::codec::decode(&bytes, "deployment").unwrap();
        assert_eq!(read, d);
        let kept = Deployment {
            retention_ms: Some(7),
            ..d
        };
        let again: Deployment =
            crate::codec::decode(&crate::codec::encode(&kept), "deployment").unwrap();
        assert_eq!(again.retention_ms, Some(7));
    }

    #[test]
    fn the_latest_deployment_exporting_the_workflow_answers() {
        let all = all();
        let d = resolve(&all, "process_order", Target::Latest).unwrap();
        assert_eq!(d.hash.as_str(), "bbbbbbbbbbbbbbbb02");
        let d = resolve(&all, "invoice", Target::Latest).unwrap();
        assert_eq!(d.name, "billing");
    }

    #[test]
    fn a_name_picks_its_latest_and_a_hash_pins() {
        let all = all();
        let d = resolve(&all, "process_order", Target::Name("order")).unwrap();
        assert_eq!(d.hash.as_str(), "bbbbbbbbbbbbbbbb02");
        let d = resolve(&all, "process_order", Target::Hash("aaaaaaaaaaaaaaaa01")).unwrap();
        assert_eq!(d.deployed_at_ms, 10);
        let d = resolve(&all, "process_order", Target::Hash("aaaaaaaaaaaa")).unwrap();
        assert_eq!(d.deployed_at_ms, 10, "a 12-character prefix is enough");
        assert!(
            find(&all, Target::Hash("aaaa")).is_none(),
            "a short prefix is not"
        );
    }

    #[test]
    fn refusals_name_what_is_deployed() {
        let all = all();
        let e = resolve(&all, "ship", Target::Latest).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no deployment exports a workflow named `ship` (deployed workflows: invoice, process_order, refund)"
        );
        let e = resolve(&all, "refund", Target::Hash("aaaaaaaaaaaaaaaa01")).unwrap_err();
        assert!(matches!(e, ResolveError::NotExported { .. }), "{e}");
        let e = resolve(&all, "refund", Target::Name("shipping")).unwrap_err();
        assert!(matches!(e, ResolveError::UnknownDeployment { .. }), "{e}");
        let e = resolve(&[], "refund", Target::Latest).unwrap_err();
        assert!(e.to_string().ends_with("nothing is deployed"), "{e}");
    }

    #[test]
    fn an_http_grant_is_a_host_never_a_url() {
        assert!(GrantSpec::check_http("api.example.com").is_ok());
        assert!(GrantSpec::check_http("127.0.0.1:9000").is_ok());
        let e = GrantSpec::check_http("http://127.0.0.1:9000").unwrap_err();
        assert!(e.contains("host:port"), "{e}");
        assert!(GrantSpec::check_http("").is_err());
    }
}
