//! The HTML timeline draws every execution where it can be seen: gemini-cli runs the call of
//! the abandoned attempt and the retry's at the same instant (its real after-tool-reset
//! recording), and both used to be drawn at the same coordinates, the red abandoned one hidden
//! under the green one. Now the second goes one row down in the executions lane, which grows.

use std::path::Path;
use std::process::Command;

fn rects(html: &str) -> Vec<(String, f64, f64)> {
    // <g class="exec …" data-attempt="N" …><title>…</title><path …/><rect x="X" y="Y"
    html.split("<g class=\"exec")
        .skip(1)
        .filter_map(|g| {
            let attempt = g
                .split("data-attempt=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_owned();
            let rect = g.split("<rect x=\"").nth(1)?;
            let x: f64 = rect.split('"').next()?.parse().ok()?;
            let y: f64 = rect.split("y=\"").nth(1)?.split('"').next()?.parse().ok()?;
            Some((attempt, x, y))
        })
        .collect()
}

#[test]
fn two_executions_at_the_same_time_are_drawn_apart() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/gemini-cli/after-tool-reset");
    let tmp = tempfile::tempdir().expect("tempdir");
    let page = tmp.path().join("r.html");
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["check", "--summary", "--html"])
        .arg(&page)
        .arg(dir.join("telemetry.log"))
        .arg(dir.join("stream.jsonl"))
        .output()
        .expect("run check");
    assert!(
        out.status.success() || out.status.code() == Some(0),
        "{out:?}"
    );
    let html = std::fs::read_to_string(&page).expect("page");
    let execs = rects(&html);
    assert_eq!(execs.len(), 2, "{execs:?}");
    let (a, b) = (&execs[0], &execs[1]);
    assert_eq!((a.0.as_str(), b.0.as_str()), ("0", "1"));
    assert_eq!(a.1, b.1, "the recording has both at the same instant");
    assert!(
        (a.2 - b.2).abs() >= 12.0,
        "drawn over each other: {execs:?}"
    );
    // The lane grew to hold the second row: the axis is below both markers.
    let axis_y: f64 = html
        .split("<g class=\"axis\"><line")
        .nth(1)
        .and_then(|s| s.split("y1=\"").nth(1))
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .expect("axis");
    assert!(
        axis_y > a.2.max(b.2) + 12.0,
        "axis at {axis_y}, markers {execs:?}"
    );
}
