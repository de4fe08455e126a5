//! Source per turn: every turn says where it came from (file and first line, stream or
//! session) in the text report, the JSON lines and the HTML page, so turns that reuse an id
//! (the three bookstore examples all call theirs `bookstore-1`) are told apart. The trace
//! attributes are asserted in `check_otlp.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .current_dir(root())
        .arg("check")
        .args(args)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()
        .expect("run retryscope check")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_text_report_tells_turns_with_one_id_apart_by_file_and_line() {
    let out = check(&["--color", "never", "examples/bookstore"]);
    let text = stdout(&out);
    let froms: Vec<&str> = text
        .lines()
        .zip(text.lines().skip(1))
        .filter(|(h, _)| h.starts_with("turn bookstore-1 "))
        .map(|(_, from)| from)
        .collect();
    assert_eq!(
        froms,
        [
            "  from examples/bookstore/naive.jsonl:1, session sess-42",
            "  from examples/bookstore/reset-late-exec.jsonl:1, session sess-42",
            "  from examples/bookstore/reset.jsonl:1, session sess-42",
        ],
        "{text}"
    );
}

#[test]
fn json_lines_carry_the_source_of_each_turn() {
    let out = check(&["--json", "examples/bookstore"]);
    let sources: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("turn").is_some())
        .map(|v| v["source"].clone())
        .collect();
    assert_eq!(
        sources,
        [
            serde_json::json!({"input": "examples/bookstore/naive.jsonl", "line": 1}),
            serde_json::json!({"input": "examples/bookstore/reset-late-exec.jsonl", "line": 1}),
            serde_json::json!({"input": "examples/bookstore/reset.jsonl", "line": 1}),
        ]
    );
}

#[test]
fn a_turn_opened_later_in_a_file_names_its_own_first_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("two.jsonl");
    std::fs::write(
        &log,
        concat!(
            r#"{"type":"turn_start","turn":"a","ts":"2026-01-01T00:00:00Z"}"#,
            "\n",
            r#"{"type":"turn_end","turn":"a","ts":"2026-01-01T00:00:01Z"}"#,
            "\n",
            r#"{"type":"turn_start","turn":"b","ts":"2026-01-01T00:00:02Z"}"#,
            "\n",
            r#"{"type":"turn_end","turn":"b","ts":"2026-01-01T00:00:03Z"}"#,
            "\n",
        ),
    )
    .expect("write");
    let out = check(&["--json", log.to_str().expect("utf-8")]);
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v.get("turn").is_some())
        .collect();
    assert_eq!(lines.len(), 2, "{}", stdout(&out));
    assert_eq!(lines[0]["source"]["line"], 1);
    assert_eq!(lines[1]["source"]["line"], 3);
}

#[test]
fn the_html_page_shows_the_source_in_the_table_and_the_timeline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("r.html");
    let out = check(&[
        "--summary",
        "--html",
        page.to_str().expect("utf-8"),
        "examples/bookstore",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let html = std::fs::read_to_string(&page).expect("page");
    for f in ["naive", "reset-late-exec", "reset"] {
        assert!(
            html.contains(&format!(
                r#"<p class="meta source">from <code>examples/bookstore/{f}.jsonl:1, session sess-42</code></p>"#
            )),
            "{f}"
        );
        // The table's data row carries it too (column 10).
        assert!(
            html.contains(&format!(
                r#""examples/bookstore/{f}.jsonl:1, session sess-42"]"#
            )),
            "{f}"
        );
    }
}
