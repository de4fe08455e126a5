//! The sharded check gives byte-identical output to the single-threaded one.

use std::io::Write;
use std::process::Command;

use retryscope::demo::{Fleet, FleetConfig};

#[test]
fn sharded_and_single_threaded_check_agree_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut fleet = Fleet::new(FleetConfig::demo(11));
    let mut line = String::new();
    for i in 0..90_000u32 {
        line.clear();
        fleet.next_line(&mut line);
        f.write_all(line.as_bytes()).unwrap();
        f.write_all(b"\n").unwrap();
        // Bad lines of every kind, spread through the log.
        match i % 5_000 {
            5 => f.write_all(b"{not json\n").unwrap(),
            6 => f
                .write_all(b"{\"turn\":\"x\",\"type\":\"text\",\"text\":\"\xff\"}\n")
                .unwrap(),
            7 => f
                .write_all(b"{\"type\":\"text\",\"text\":\"no turn\"}\n")
                .unwrap(),
            8 => f
                .write_all(&[b'z'; 3000])
                .and_then(|()| f.write_all(b"\n"))
                .unwrap(),
            // A turn logged without timestamps, right after events of other turns that moved
            // the clock far ahead: its times come from the latest event time seen, which must
            // be the same on both paths.
            9 => {
                for k in 0..4u64 {
                    writeln!(
                        f,
                        r#"{{"turn":"bump-{i}-{k}","type":"attempt_start","attempt":0,"ts":{}}}"#,
                        1_900_000_000_000u64 + u64::from(i) * 10 + k
                    )
                    .unwrap();
                }
                for t in ["turn_start", "text", "finish", "turn_end"] {
                    writeln!(
                        f,
                        r#"{{"turn":"no-ts-{i}","type":"{t}","attempt":0,"text":"x","reason":"stop"}}"#
                    )
                    .unwrap();
                }
            }
            _ => {}
        }
    }
    // Leave turns open at end of input too: no drain.
    f.flush().unwrap();
    drop(f);
    assert!(
        std::fs::metadata(&path).unwrap().len() > 8 << 20,
        "big enough to shard"
    );
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(["check", "--json", "--max-line-bytes", "2048"])
            .args(extra)
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success());
        (out.stdout, out.stderr)
    };
    let (sharded, sharded_err) = run(&[]);
    let (single, single_err) = run(&["--single-thread"]);
    assert!(sharded.len() > 1_000_000);
    assert_eq!(sharded_err, single_err, "bad lines reported identically");
    assert!(String::from_utf8_lossy(&single_err).contains("skipped: too_long"));
    assert!(
        sharded == single,
        "reports differ between sharded and single-threaded check"
    );
}
