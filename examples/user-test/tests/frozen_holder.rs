//! The chaos test a zkfence user writes for their own service: frozen right after its lease
//! check for longer than its session timeout, the service must not write once a successor
//! has, and the ledger must show no stale entry.

use std::time::Duration;
use zkfence_testkit::{History, LocalZooKeeper, Service, ServiceOptions};

#[test]
#[ignore = "the service role of a_frozen_holder_is_refused_and_the_successor_wins, which starts it"]
fn service() {
    if !zkfence_testkit::is_service("service") {
        return;
    }
    let hosts = std::env::var("ZK").expect("ZK");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(ledger_service::run(&hosts, 1000, || {
        zkfence_testkit::pause_point("after-check")
    }))
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_holder_is_refused_and_the_successor_wins(
) -> Result<(), Box<dyn std::error::Error>> {
    let zk = LocalZooKeeper::start()?;
    let options = ServiceOptions::new("service")
        .env("ZK", zk.addr())
        .pause_at("after-check");
    let mut frozen = Service::spawn(options)?;
    let held: i64 = frozen
        .wait_line(|l| l.starts_with("holding"), Duration::from_secs(30))
        .await?[8..]
        .parse()?;
    // Frozen between its check and its write, it outlives its session on the server; the
    // successor gets the lock and writes.
    frozen.wait_paused(Duration::from_secs(30)).await?;
    let successor = ledger_service::run(&zk.addr(), 3, || {}).await?;
    frozen.resume()?;
    frozen
        .wait_line(|l| l == "refused", Duration::from_secs(30))
        .await?;
    let ledger = ledger_service::ledger(&zk.addr()).await?;
    assert!(
        successor > held && ledger == vec![successor; 3],
        "{ledger:?}"
    );
    History::from_accepted(ledger).check()?;
    Ok(())
}
