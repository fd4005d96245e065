//! Paths of the guest components that `build.rs` builds for the tests, the
//! check that a path still holds the artifact this build made, and the
//! clock tests move by hand.

use sha2::{Digest, Sha256};

/// The clock tests move by hand (the engine's injectable clock).
pub use keel_core::clock::ManualClock;

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));

/// The path of guest `name` (`testbed`, `order_hooks`, ...) as this build
/// made it; refuses a guest it did not build, a missing file and a file
/// changed since it was built, naming which.
pub fn verified(name: &str) -> Result<&'static str, String> {
    let Some((_, path, sha)) = ALL.iter().find(|(n, _, _)| *n == name) else {
        let names: Vec<&str> = ALL.iter().map(|(n, _, _)| *n).collect();
        return Err(format!(
            "this build makes no guest `{name}`; it makes: {}",
            names.join(", ")
        ));
    };
    let bytes = std::fs::read(path).map_err(|e| {
        format!("guest `{name}` is missing at `{path}` ({e}): make the build script run again with `touch tests/build.rs && cargo build -p keel-tests`")
    })?;
    let found: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if found != *sha {
        return Err(format!(
            "guest `{name}` at `{path}` is not the one this build made (SHA-256 {found}, built {sha}): it is stale or was changed; make the build script run again with `touch tests/build.rs && cargo build -p keel-tests`"
        ));
    }
    Ok(path)
}

/// Compiled components, shared by every test of this build and kept
/// between runs: `tmp/keel-compiled` in the target directory (the folder
/// cargo gives integration tests as `CARGO_TARGET_TMPDIR`). Each guest is
/// compiled once per build, not once per test's store.
pub fn compiled_cache() -> std::path::PathBuf {
    std::path::Path::new(env!("OUT_DIR"))
        .ancestors()
        .nth(4)
        .expect("OUT_DIR is <target>/<profile>/build/<package>/out")
        .join("tmp/keel-compiled")
}

/// The durability the tests' engines give workflows that declare none:
/// `KEEL_TEST_DURABILITY` (`effect_gated`, `strict` or `relaxed`), else
/// the engine's own default. scripts/test.sh runs the PostgreSQL pass
/// with `strict`, so strict keeps the tests written for it.
pub fn default_durability() -> keel_core::manifest::Durability {
    use keel_core::manifest::Durability;
    match std::env::var("KEEL_TEST_DURABILITY").as_deref() {
        Err(_) => Durability::default(),
        Ok("effect_gated") => Durability::EffectGated,
        Ok("strict") => Durability::Strict,
        Ok("relaxed") => Durability::Relaxed,
        Ok(other) => {
            panic!("KEEL_TEST_DURABILITY is effect_gated, strict or relaxed, not `{other}`")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Python SDK builds against its own copy of keel's world.
    #[test]
    fn the_python_sdk_carries_keel_s_wit_unchanged() {
        assert!(
            include_str!("../../guest-sdk/wit/keel.wit")
                == include_str!("../../sdk/python/keel/wit/deps/keel.wit"),
            "sdk/python/keel/wit/deps/keel.wit differs from guest-sdk/wit/keel.wit: copy it over"
        );
    }

    #[test]
    fn every_built_guest_verifies_and_others_are_refused() {
        for (name, path, _) in ALL {
            assert_eq!(verified(name).unwrap(), *path);
        }
        let err = verified("nope").unwrap_err();
        assert!(
            err.contains("no guest `nope`") && err.contains("testbed"),
            "{err}"
        );
    }
}
