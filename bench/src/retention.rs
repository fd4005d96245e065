//! A store of many ended runs and 100 live ones: listing by attribute,
//! the purge of the ended ones past a retention of a day, the store's
//! size before and after, and the live runs completing afterwards.

use super::*;
use keel_host::core::file::JournalFile;
use keel_host::core::retention::StoreStats;
use keel_host::core::{Clock, RunFilter};
use keel_host::store::Store;

const DAY: u64 = 86_400_000;
const LIVE: usize = 100;

pub(super) async fn figures(args: &Args) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("keel-bench-retention-{}", std::process::id()));
    let sled = Arc::new(keel_host::store::sled::SledStore::open(&dir)?);
    let outcome = on("sled", sled, &dir.join("compiled"), args, || async {
        Ok(())
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome?;
    if let Some(url) = &args.postgres {
        use keel_host::store::postgres::{PgOptions, PgStore};
        let mut options = PgOptions::new(url);
        options.schema = format!("keel_bench_retention_{}", std::process::id());
        let pg = Arc::new(PgStore::open(options).await?);
        let vacuumed = pg.clone();
        let outcome = on(
            "PostgreSQL",
            pg.clone(),
            &keel_host::user_cache_dir(),
            args,
            || async move { Ok(vacuumed.vacuum_full().await?) },
        )
        .await;
        pg.drop_schema().await?;
        outcome?;
    }
    Ok(())
}

async fn on<F, Fut>(
    what: &str,
    store: Arc<dyn Store>,
    cache: &std::path::Path,
    args: &Args,
    compact: F,
) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut config = Config::caching_in(cache);
    config.retention.default_ms = Some(DAY);
    let keel = Keel::open(config, store.clone())?;
    let loaded = keel.load(&args.component).await?;
    let model = keel.run(&loaded, "two_steps", "1").await?;
    let file = JournalFile::new(&model, keel.journal(&model.run_id).await?);
    let n = args.retention_runs;
    let t = Instant::now();
    import_copies(&keel, &file, n).await?;
    println!(
        "{what}: {n} ended runs imported in {:.1} s ({:.0} runs/s)",
        t.elapsed().as_secs_f64(),
        n as f64 / t.elapsed().as_secs_f64()
    );
    let mut live = Vec::new();
    for _ in 0..LIVE {
        live.push(keel.start(&loaded, "sleeper", "10").await?.run_id);
    }
    let before = keel.store_stats().await?;
    list_by_attribute(what, &keel).await?;
    let t = Instant::now();
    let purge = keel.purge_ended(usize::MAX).await?;
    let took = t.elapsed();
    anyhow::ensure!(
        purge.deleted.runs.len() == n,
        "{what}: the purge deleted {} runs, not {n}",
        purge.deleted.runs.len()
    );
    let after = keel.store_stats().await?;
    anyhow::ensure!(
        after.runs_by_status.get("completed") == Some(&1)
            && after.runs_by_status.get("pending") == Some(&(LIVE as u64)),
        "{what}: after the purge the store holds {:?}",
        after.runs_by_status
    );
    println!(
        "{what}: purge of {n} ended runs ({} journal entries, {} bytes) in {:.1} s ({:.0} runs/s, batches of {})",
        purge.deleted.journal_entries,
        purge.deleted.bytes,
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        keel_host::PURGE_BATCH
    );
    compact().await?;
    let compacted = keel.store_stats().await?;
    print_sizes(what, &before, &after, &compacted);
    // Whether the freed space takes new runs: as many again, purged.
    import_copies(&keel, &file, n).await?;
    let refilled = keel.store_stats().await?;
    println!(
        "{what}: store size {:.1} MiB with {n} ended runs imported again",
        refilled.size_bytes as f64 / (1 << 20) as f64
    );
    keel.purge_ended(usize::MAX).await?;
    keel.work(true).await?;
    for run_id in &live {
        let run = keel.get_run(run_id).await?;
        anyhow::ensure!(
            run.status == RunStatus::Completed,
            "{what}: live run {run_id} is {} after the purge",
            run.status.as_str()
        );
    }
    println!("{what}: the {LIVE} live runs completed after the purge");
    Ok(())
}

/// Imports `n` copies of `file`'s run, admitted and ended two days
/// ago, 64 at a time.
async fn import_copies(keel: &Keel, file: &JournalFile, n: usize) -> anyhow::Result<()> {
    let at = keel_host::SystemClock.now_ms() - 2 * DAY;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        if tasks.len() == 64 {
            tasks.join_next().await.expect("a task")??;
        }
        let mut copy = file.clone();
        let run = &mut copy.header.run;
        run.run_id = format!("bench-{i:07}").into();
        (run.created_at_ms, run.updated_at_ms) = (at + i as u64, at + i as u64);
        run.attributes = [("tenant".to_string(), format!("t{}", i % 100))].into();
        let keel = keel.clone();
        tasks.spawn(async move { keel.import(&copy).await.map(|_| ()) });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// The first page of one tenant's runs, ten times.
async fn list_by_attribute(what: &str, keel: &Keel) -> anyhow::Result<()> {
    let filter = RunFilter {
        attributes: [("tenant".to_string(), "t42".to_string())].into(),
        ..RunFilter::default()
    };
    let mut latencies = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let page = keel.runs_page(&filter, None, 50).await?;
        latencies.push(t.elapsed());
        let tenant = filter.attributes.get("tenant");
        anyhow::ensure!(
            !page.runs.is_empty()
                && page
                    .runs
                    .iter()
                    .all(|r| r.attributes.get("tenant") == tenant),
            "{what}: the page of t42 holds {:?}",
            page.runs.iter().map(|r| &r.attributes).collect::<Vec<_>>()
        );
    }
    print_latencies(
        &format!("{what}: runs list --attr tenant=t42 (a page of 50)"),
        latencies,
    );
    Ok(())
}

fn print_sizes(what: &str, before: &StoreStats, after: &StoreStats, compacted: &StoreStats) {
    let mib = |s: &StoreStats| s.size_bytes as f64 / (1 << 20) as f64;
    println!(
        "{what}: store size {:.1} MiB before the purge, {:.1} MiB after, {:.1} MiB after {}",
        mib(before),
        mib(after),
        mib(compacted),
        if what == "sled" {
            "nothing (sled reuses the space)"
        } else {
            "VACUUM FULL"
        }
    );
}
