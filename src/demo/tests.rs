//! Tests of the synthetic fleet's building blocks and presets.

use super::*;

#[test]
fn json_strings_round_trip_through_serde() {
    for s in [
        "plain",
        "q\"b\\s",
        "nl\n\r\ttab",
        "\u{1}\u{1f}",
        "é—ノ🎉",
        "",
    ] {
        let mut out = String::new();
        push_json_str(&mut out, s);
        assert_eq!(
            serde_json::from_str::<String>(&out).ok().as_deref(),
            Some(s)
        );
    }
}

#[test]
fn fragments_cover_the_text_on_character_boundaries() {
    let mut rng = Rng::new(1);
    let mut cuts = Vec::new();
    let text = "ご不便をおかけして申し訳ありません。Köln — \"ok\" 🎉 and more ASCII text here";
    for n in [1, 3, 10, 40, 1_000] {
        cut_fragments(&mut rng, text, n, &mut cuts);
        let joined: String = cuts.iter().map(|&(a, b)| &text[a..b]).collect();
        assert_eq!(joined, text);
        assert!(cuts.iter().all(|&(a, b)| a < b));
        assert!(cuts.len() <= n);
    }
}

#[test]
fn calibration_counts_storms_towards_the_rate() {
    let q = calibrate_break(0.05, 0.001, 6);
    assert!(q > 0.0 && q < 0.05, "{q}");
    assert_eq!(calibrate_break(0.0, 0.5, 6), 0.0);
    assert_eq!(calibrate_break(1.0, 0.0, 6), 1.0);
    assert!((calibrate_break(0.3, 0.0, 1) - 0.3).abs() < 1e-9);
}

#[test]
fn live_replay_never_stamps_a_line_after_it_is_handed_out() {
    let mut fleet = Fleet::new(FleetConfig::demo(7));
    let mut now = 1_800_000_000_000i64;
    let mut seen = 0;
    for _ in 0..400 {
        let mut out = Vec::new();
        fleet.write_due(now, 1, &mut out).unwrap();
        for line in String::from_utf8(out).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let ts = v["ts"].as_i64().unwrap();
            assert!(
                ts <= now,
                "line stamped {} ms after it was handed out",
                ts - now
            );
            assert!(
                ts >= now - 60_000,
                "line stamped {} ms in the past",
                now - ts
            );
            seen += 1;
        }
        now += 50;
    }
    assert!(seen > 100, "{seen} lines in 20 s");
    assert!(fleet.stats().turns_completed > 5);
}

#[test]
fn rng_ranges_stay_in_bounds() {
    let mut rng = Rng::new(9);
    for _ in 0..10_000 {
        let x = rng.range(-3, 3);
        assert!((-3..=3).contains(&x));
        assert!(rng.below(7) < 7);
        let u = rng.unit();
        assert!((0.0..1.0).contains(&u));
    }
    assert_eq!(rng.range(5, 5), 5);
    assert_eq!(rng.below(0), 0);
}
