//! Builds the guests to wasm32-wasip2 (as wasmtime's test-programs
//! artifacts do) and exposes their paths as constants, with the SHA-256 of
//! each copy it made, so that whoever reads an artifact can tell that it
//! is the one this build produced (`cargo run -p keel-tests --bin guests`).
//!
//! The guests get their own target directory beside the host's, so this
//! nested cargo never waits on the outer one's lock. Feature variants of a
//! guest are built into that directory one after another, so only the
//! copies under `OUT_DIR` are artifacts; the directory holds the last
//! variant built.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

const GUESTS: &[&str] = &[
    "order",
    "order-hooks",
    "chat-agent",
    "order-v2-compatible",
    "order-v2-incompatible",
    "testbed",
];

fn main() {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    // Read at run time: the script's binary may be reused from a clone elsewhere.
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.parent().expect("workspace root").to_path_buf();
    // OUT_DIR is <target>/<profile>/build/<pkg>/out.
    let target = out_dir
        .ancestors()
        .nth(4)
        .expect("target dir")
        .join("keel-guests");
    // Relative to this package, so a target dir shared by several clones
    // watches the sources of the clone being built.
    for dir in ["guest-sdk", "guests", "sdk/python/keel"] {
        println!("cargo:rerun-if-changed=../{dir}");
    }
    println!("cargo:rerun-if-env-changed=KEEL_PYTHON");

    let mut artifacts = String::new();
    let mut listed = Vec::new();
    let build = |features: &[&str], packages: &[&str]| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(&workspace)
            .args(["build", "--release", "--target", "wasm32-wasip2"])
            .env("CARGO_TARGET_DIR", &target);
        // The outer build's flags and wrappers (clippy's among them) are not the guests'.
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_BUILD_RUSTFLAGS",
            "CARGO_MAKEFLAGS",
            "RUSTC_WRAPPER",
            "RUSTC_WORKSPACE_WRAPPER",
            "CLIPPY_ARGS",
        ] {
            cmd.env_remove(var);
        }
        for p in packages {
            cmd.args(["-p", p]);
        }
        for f in features {
            cmd.args(["--features", f]);
        }
        let status = cmd.status().expect("running cargo to build the guests");
        assert!(
            status.success(),
            "building the guests failed; run `cargo build --release --target wasm32-wasip2 -p <guest>` to see why"
        );
    };
    build(&[], GUESTS);
    let mut record = |package: &str, name: &str| {
        let (constant, entry) = copy(&target, &out_dir, package, name);
        artifacts += &constant;
        listed.push(entry);
    };
    for guest in GUESTS {
        record(guest, guest);
    }
    build(&["testbed/reordered"], &["testbed"]);
    record("testbed", "testbed_reordered");
    build(&["testbed/bad_key"], &["testbed"]);
    record("testbed", "testbed_bad_key");
    for (name, module, dirs) in PYTHON_GUESTS {
        let (constant, entry) = build_python(&workspace, &out_dir, name, module, dirs);
        artifacts += &constant;
        listed.push(entry);
    }
    artifacts += &format!(
        "/// Every guest this build made: `(name, path, SHA-256 of the copy)`.\npub const ALL: &[(&str, &str, &str)] = &[{}];\n",
        listed.join(", ")
    );
    std::fs::write(out_dir.join("artifacts.rs"), artifacts).expect("writing artifacts.rs");
}

/// The Python guests: `guests/python/NAME/NAME.py`, built with the SDK in
/// `sdk/python` by the Python in `KEEL_PYTHON` (which has the pinned
/// componentize-py; `scripts/python-sdk.sh` makes one).
/// `(name, module, directories under guests/python)`.
const PYTHON_GUESTS: &[(&str, &str, &[&str])] = &[
    ("order", "order", &["order"]),
    ("order_v2", "order_v2", &["order_v2", "order"]),
    ("hooks", "hooks", &["hooks"]),
    ("probes", "probes", &["probes"]),
];

/// Builds Python guest `name` into OUT_DIR as `python_NAME.wasm`; returns
/// its constant's definition (`PYTHON_NAME`) and its entry in `ALL`.
fn build_python(
    workspace: &Path,
    out_dir: &Path,
    name: &str,
    module: &str,
    dirs: &[&str],
) -> (String, String) {
    let python = std::env::var("KEEL_PYTHON").unwrap_or_else(|_| "python3".into());
    let dest = out_dir.join(format!("python_{name}.wasm"));
    let mut command = Command::new(&python);
    command
        .current_dir(workspace)
        .env("PYTHONPATH", workspace.join("sdk/python"))
        // No bytecode caches in the sources this script watches.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["-m", "keel", "build", module, "-o"])
        .arg(&dest);
    for dir in dirs {
        command
            .arg("-p")
            .arg(workspace.join("guests/python").join(dir));
    }
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("running `{python}` to build the Python guests: {e}; set KEEL_PYTHON to a Python with componentize-py (`eval \"$(scripts/python-sdk.sh)\"`)"));
    assert!(
        status.success(),
        "building the Python guest `{name}` failed; set KEEL_PYTHON to a Python with the pinned componentize-py: `eval \"$(scripts/python-sdk.sh)\"`"
    );
    let bytes = std::fs::read(&dest).unwrap_or_else(|e| panic!("reading {}: {e}", dest.display()));
    let sha = hex(&Sha256::digest(&bytes));
    let path = dest.display().to_string();
    let constant_name = format!("PYTHON_{}", name.to_uppercase());
    (
        format!(
            "/// The Python `{name}` guest component.\npub const {constant_name}: &str = {path:?};\n"
        ),
        format!("(\"python_{name}\", {path:?}, {sha:?})"),
    )
}

/// Copies a built guest into OUT_DIR; returns its constant's definition
/// and its entry in `ALL`.
fn copy(target: &Path, out_dir: &Path, package: &str, name: &str) -> (String, String) {
    let built = target
        .join("wasm32-wasip2/release")
        .join(format!("{}.wasm", package.replace('-', "_")));
    let dest = out_dir.join(format!("{name}.wasm"));
    std::fs::copy(&built, &dest).unwrap_or_else(|e| panic!("copying {}: {e}", built.display()));
    let bytes = std::fs::read(&dest).unwrap_or_else(|e| panic!("reading {}: {e}", dest.display()));
    let sha = hex(&Sha256::digest(&bytes));
    let path = dest.display().to_string();
    let constant = format!(
        "/// The `{name}` guest component.\npub const {}: &str = {path:?};\n",
        name.to_uppercase().replace('-', "_"),
    );
    (constant, format!("({name:?}, {path:?}, {sha:?})"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
