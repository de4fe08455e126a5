//! Issue 26, any format: a file without turn ids (a provider's SSE, an agent's own output) is
//! shipped whole to the partition of its identity, not all to partition 0, so such streams
//! spread over the partitions and their collectors; each is still read whole by one owner,
//! and the findings stream holds what `check` finds in the same files. Standard input
//! (`ship -`) is routed as such a file, as the stream `<source id>:stdin`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::nats_support::{
    check_json, collector_with, findings_count, findings_in_stream, have_nats_server, server_in,
    shipper, wait_for, with_js,
};

/// The subjects of the events stream's messages that carry shipped lines (the collectors'
/// clock messages, without a stream name, go to every partition they own).
fn subjects_with_lines(url: &str) -> std::collections::BTreeSet<String> {
    with_js(url, async |js| {
        let mut stream = js
            .get_stream("RETRYSCOPE_EVENTS")
            .await
            .expect("events stream");
        let state = stream.info().await.expect("stream info").state.clone();
        let mut used = std::collections::BTreeSet::new();
        for seq in state.first_sequence..=state.last_sequence {
            if let Ok(m) = stream.get_raw_message(seq).await
                && m.headers.get("Retryscope-Stream").is_some()
            {
                used.insert(m.subject.to_string());
            }
        }
        used
    })
}

/// Findings by kind.
fn kinds<'a>(findings: impl Iterator<Item = &'a serde_json::Value>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for f in findings {
        *out.entry(f["kind"].as_str().unwrap_or("?").to_owned())
            .or_insert(0) += 1;
    }
    out
}

#[test]
fn provider_streams_spread_over_the_partitions_and_are_read_whole() {
    if !have_nats_server() {
        return;
    }
    const COPIES: usize = 8;
    const PARTITIONS: u32 = 8;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let logs = d.join("logs");
    std::fs::create_dir_all(&logs).expect("logs");
    let splice =
        crate::harness::fixture("tests/fixtures/providers/openai-chat/id-change-splice.sse");
    for i in 0..COPIES {
        std::fs::copy(&splice, logs.join(format!("chat-{i}.sse"))).expect("copy");
    }
    let files: Vec<_> = std::fs::read_dir(&logs)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .collect();
    let checked = check_json(&files);
    let want = kinds(checked.findings());
    let n: u64 = want.values().sum();
    assert!(
        want.get("spliced_stream") >= Some(&(COPIES as u64)),
        "{want:?}"
    );

    let (server, url) = server_in(d);
    // A provider stream has no turn end: its turn closes (and its spliced text is judged)
    // when it has been quiet for the idle timeout, as `check` closes it at the end of input.
    let (c1, _) = collector_with(d, &url, "c1", "4", "300", &["--idle-timeout-secs", "1"]);
    let ship = shipper(d, &url, &logs.join("*"), &PARTITIONS.to_string());
    wait_for(
        "every finding in the stream",
        Duration::from_secs(90),
        || findings_count(&url) >= n,
    );
    std::thread::sleep(Duration::from_millis(1500));
    let got: Vec<serde_json::Value> = findings_in_stream(&url)
        .iter()
        .map(|f| serde_json::from_str(f).expect("JSON"))
        .collect();
    assert_eq!(kinds(got.iter()), want, "the findings stream against check");

    // The SSE files' lines landed on several partitions (the subjects of the messages that
    // carry lines; the collector's clock messages go to every partition it owns); before,
    // all on partition 0. Eight identities on one of eight partitions by chance: about 5e-7.
    let used = subjects_with_lines(&url);
    assert!(
        used.len() >= 2,
        "{COPIES} SSE files used partitions {used:?} only"
    );
    for p in [ship, c1, server] {
        p.terminate();
    }
}

/// A finding without its turn id: a provider stream's turn is named after its stream (the
/// file name in `check`, `<source id>:stdin` through `ship -`).
fn without_turn(f: &serde_json::Value) -> String {
    let mut f = f.clone();
    if let Some(o) = f.as_object_mut() {
        o.remove("turn");
    }
    f.to_string()
}

/// `ship -` routes as files are routed: an OpenAI Chat SSE body piped in has no turn id, so
/// it went to partition 0 line by line; now its head says a provider stream and all of it
/// goes to the partition of `<source id>:stdin`, and the collector owning that partition
/// finds what `check` finds in the same body.
#[test]
fn a_provider_stream_piped_into_ship_goes_whole_to_its_identitys_partition() {
    use std::process::{Command, Stdio};
    if !have_nats_server() {
        return;
    }
    const PARTITIONS: u32 = 8;
    // A source id whose stream is not partition 0's, so the test tells the two routes apart.
    let source_id = "host";
    let partition = retryscope::nats::partition::partition_of_stream("host:stdin", PARTITIONS);
    assert_ne!(partition, 0, "pick another source id");
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let splice =
        crate::harness::fixture("tests/fixtures/providers/openai-chat/id-change-splice.sse");
    let checked = check_json(&[&splice]);
    let mut want: Vec<String> = checked.findings().map(without_turn).collect();
    want.sort();
    assert!(!want.is_empty());

    let (server, url) = server_in(d);
    let status = Command::new(crate::harness::bin())
        .args(["ship", "-", "--nats", &url, "--source-id", source_id])
        .args(["--partitions", &PARTITIONS.to_string()])
        .stdin(std::fs::File::open(&splice).expect("fixture"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("ship.log")).expect("log"))
        .status()
        .expect("run ship -");
    assert!(status.success(), "ship - exits 0 when stdin ends");
    assert_eq!(
        subjects_with_lines(&url),
        [format!("retryscope.events.{partition}")].into(),
        "all of the piped stream on the partition of host:stdin"
    );

    // A provider stream has no turn end: its turn closes when it has been quiet for the idle
    // timeout, as `check` closes it at the end of input.
    let (c1, _) = collector_with(d, &url, "c1", "4", "300", &["--idle-timeout-secs", "1"]);
    wait_for(
        "the piped stream's findings",
        Duration::from_secs(60),
        || findings_count(&url) >= want.len() as u64,
    );
    std::thread::sleep(Duration::from_millis(1500));
    let mut got: Vec<String> = findings_in_stream(&url)
        .iter()
        .map(|f| without_turn(&serde_json::from_str(f).expect("JSON")))
        .collect();
    got.sort();
    assert_eq!(got, want, "the findings stream against check");
    for p in [c1, server] {
        p.terminate();
    }
}
