//! Prints the path of each guest named on the command line as this build
//! made it (one per line), after checking that the file is that artifact;
//! exits 1 naming a guest that is missing, stale or unknown. Scripts that
//! need the guests (`scripts/e2e-server.sh`) ask cargo to run this, so
//! cargo rebuilds the guests first whenever their sources changed.

fn main() {
    let names: Vec<String> = std::env::args().skip(1).collect();
    if names.is_empty() {
        eprintln!("usage: guests NAME...; this build makes:");
        for (name, path, _) in keel_tests::ALL {
            eprintln!("  {name}  {path}");
        }
        std::process::exit(2);
    }
    for name in &names {
        match keel_tests::verified(name) {
            Ok(path) => println!("{path}"),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
}
