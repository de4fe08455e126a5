//! The collector's health setters: deltas move counters by growth only.

use super::*;

#[test]
fn health_deltas_move_counters_by_growth_only() {
    let m = metrics();
    let mut stats = CorrelatorStats {
        late_events: 3,
        evicted_turns: 1,
        ..CorrelatorStats::default()
    };
    m.set_correlator_stats(&stats, 7);
    m.set_correlator_stats(&stats, 5);
    stats.late_events = 4;
    m.set_correlator_stats(&stats, 2);
    assert_eq!(m.value("retryscope_late_events_total", &[]), Some(4.0));
    assert_eq!(m.value("retryscope_evicted_turns_total", &[]), Some(1.0));
    assert_eq!(m.value("retryscope_open_turns", &[]), Some(2.0));

    m.set_otlp(10, 1, 0);
    m.set_otlp(15, 1, 2);
    m.set_otlp(4, 0, 0); // the exporter restarted: its counters began again at zero
    assert_eq!(
        m.value("retryscope_otlp_spans_exported_total", &[]),
        Some(19.0)
    );
    assert_eq!(
        m.value("retryscope_otlp_spans_dropped_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        m.value("retryscope_otlp_export_failures_total", &[]),
        Some(2.0)
    );

    m.add_events_read(Source::File, 10);
    m.add_events_decoded(Source::File, 8);
    m.add_bad_lines(Source::File, BadLineReason::InvalidJson, 2);
    m.add_unknown_events(Source::File, 1);
    m.add_events_read(Source::File, 2);
    m.add_events_decoded(Source::File, 2);
    m.add_events_read(Source::Stdin, 5);
    m.add_bad_lines(Source::Stdin, BadLineReason::TooLong, 1);
    assert_eq!(
        m.value("retryscope_events_read_total", &["file"]),
        Some(12.0)
    );
    assert_eq!(
        m.value("retryscope_events_decoded_total", &["file"]),
        Some(10.0)
    );
    assert_eq!(
        m.value("retryscope_bad_lines_total", &["file", "invalid_json"]),
        Some(2.0)
    );
    assert_eq!(
        m.value("retryscope_unknown_events_total", &["file"]),
        Some(1.0)
    );
    assert_eq!(
        m.value("retryscope_events_read_total", &["stdin"]),
        Some(5.0)
    );
    assert_eq!(
        m.value("retryscope_bad_lines_total", &["stdin", "too_long"]),
        Some(1.0)
    );

    m.inc_file_errors("checkpoint_orphaned");
    assert_eq!(
        m.value("retryscope_file_errors_total", &["checkpoint_orphaned"]),
        Some(1.0)
    );
    assert_eq!(
        m.value("retryscope_file_errors_total", &["read"]),
        Some(0.0)
    );

    m.set_files_watched(3);
    m.inc_file_rotations();
    m.inc_file_truncations();
    m.set_source_lag_bytes(Source::File, 4096);
    m.inc_checkpoint_writes();
    m.inc_checkpoint_writes();
    m.inc_checkpoint_failures();
    assert_eq!(m.value("retryscope_files_watched", &[]), Some(3.0));
    assert_eq!(m.value("retryscope_file_rotations_total", &[]), Some(1.0));
    assert_eq!(m.value("retryscope_file_truncations_total", &[]), Some(1.0));
    assert_eq!(
        m.value("retryscope_source_lag_bytes", &["file"]),
        Some(4096.0)
    );
    assert_eq!(
        m.value("retryscope_checkpoint_writes_total", &[]),
        Some(2.0)
    );
    assert_eq!(
        m.value("retryscope_checkpoint_failures_total", &[]),
        Some(1.0)
    );
    // A gauge: the last checkpoint's figure, not a sum.
    let left_out = "retryscope_checkpoint_stream_states_left_out";
    assert_eq!(m.value(left_out, &[]), Some(0.0), "exists from the start");
    m.set_stream_states_left_out(90_000);
    m.set_stream_states_left_out(12);
    assert_eq!(m.value(left_out, &[]), Some(12.0));
}
