//! Issue 26, production shape: a NATS server with TLS and users, reached with `--nats-ca` and a
//! user in the URL; a server in operator mode (JWT accounts), reached with `--nats-creds`;
//! one name per live collector; the replicas and retention of what retryscope creates. Real
//! nats-server processes, as in `cluster.rs`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::nats_support::*;
use crate::tls_receiver::Pki;

/// Findings in a collector's `--findings-out`, as canonical JSON, sorted.
fn findings_file(path: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v.to_string())
        .collect();
    out.sort();
    out
}

/// A fresh server with `turns` first halves of refund turns shipped into `partitions`: the
/// server, its URL and the shipper (both stopped when dropped).
fn shipped(d: &Path, prefix: &str, turns: usize, partitions: &str) -> (Proc, String, Proc) {
    let (server, url) = server_in(d);
    let log = d.join("agent.jsonl");
    append(&log, &refund_log(prefix, turns, 10).0);
    let ship = shipper(d, &url, &log, partitions);
    (server, url, ship)
}

fn owned(port: u16) -> f64 {
    scrape(port).map_or(0.0, |m| sum(&m, "retryscope_nats_partitions_owned"))
}

#[test]
fn a_tls_server_with_users_is_reached_with_the_ca_and_a_user_in_the_url() {
    if !have_nats_server() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let d = d.path();
    let pki = Pki::new();
    let (cert, key) = (pki.server_cert(), pki.server_key_file());
    let port = free_port();
    let _server = nats_server_with(
        port,
        &d.join("js"),
        &d.join("nats.log"),
        &[
            "--tls",
            "--tlscert",
            &cert.display().to_string(),
            "--tlskey",
            &key.display().to_string(),
            "--user",
            "collector",
            "--pass",
            "s3cret",
        ],
    );
    let url = format!("nats://collector:s3cret@127.0.0.1:{port}");
    let ca = pki.ca_file().display().to_string();
    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("tls", 20, 10);
    append(&log, &first);
    append(&log, &second);
    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "").expect("empty");
    let (expected, _) = check(&log, &empty);
    assert!(!expected.is_empty());
    let _ship = shipper_with(d, &url, &log, "4", &["--nats-ca", &ca]);
    let (_c, mport) = collector_with(d, &url, "c1", "2", "100", &["--nats-ca", &ca]);
    // The findings stream is the exactly-once record (a collector's own --findings-out may
    // repeat what a partition retaken under load replays), read over TLS with the user.
    let options = || {
        async_nats::ConnectOptions::new()
            .add_root_certificates(pki.ca_file())
            .require_tls(true)
            .user_and_password("collector".into(), "s3cret".into())
    };
    let got = settled_findings_using(
        &format!("nats://127.0.0.1:{port}"),
        options,
        expected.len(),
        Duration::from_secs(60),
    );
    assert_eq!(
        got.len(),
        expected.len(),
        "the collector over TLS finds what check finds (ship: {}; collector: {})",
        log_text(d, "ship"),
        log_text(d, "c1")
    );
    assert_eq!(got, expected);
    assert!(owned(mport) > 0.0);
    assert!(!findings_file(&d.join("c1-findings.jsonl")).is_empty());
    // A wrong password: the server's refusal stops the shipper (it retried it for ever).
    let wrong = d.join("wrong");
    std::fs::create_dir_all(&wrong).expect("dir");
    let bad_url = format!("nats://collector:wrong@127.0.0.1:{port}");
    let mut refused = shipper_with(&wrong, &bad_url, &log, "4", &["--nats-ca", &ca]);
    let status = refused.wait_exit(Duration::from_secs(30));
    let said = log_text(&wrong, "ship");
    assert!(status.is_some_and(|s| !s.success()), "{status:?}: {said}");
    assert!(
        said.contains("the server refused the credentials"),
        "{said}"
    );
    // A CA that did not sign the server's certificate, and no CA at all (the system's
    // roots): the handshake fails and the command stops saying so (it waited for ever,
    // logging "NATS not reachable yet").
    let other = Pki::new();
    let other_ca = other.ca_file().display().to_string();
    for (name, extra) in [
        ("other-ca", vec!["--nats-ca", other_ca.as_str()]),
        ("no-ca", vec![]),
    ] {
        let dir = d.join(name);
        std::fs::create_dir_all(&dir).expect("dir");
        let mut failed = shipper_with(&dir, &url, &log, "4", &extra);
        let status = failed.wait_exit(Duration::from_secs(30));
        let said = log_text(&dir, "ship");
        assert!(
            status.is_some_and(|s| !s.success()),
            "{name}: {status:?}: {said}"
        );
        assert!(
            said.contains("TLS with the server failed") && !said.contains("not reachable yet"),
            "{name}: {said}"
        );
        assert!(
            !said.contains("s3cret"),
            "{name}: the password stays out of the log"
        );
    }
}

#[test]
fn a_second_live_collector_of_one_name_is_refused_and_a_killed_ones_restart_is_not() {
    if !have_nats_server() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let d = d.path();
    let (_server, url, _ship) = shipped(d, "dup", 4, "4");
    let (first, port) = collector(d, &url, "c1", "4", "100");
    wait_for("c1 to own partitions", Duration::from_secs(30), || {
        owned(port) > 0.0
    });
    // The same name again, while c1 lives: refused, and c1 keeps its partitions.
    let again = d.join("again");
    std::fs::create_dir_all(&again).expect("dir");
    let (mut second, _) = collector(&again, &url, "c1", "4", "100");
    let status = second.wait_exit(Duration::from_secs(30));
    let said = log_text(&again, "c1");
    assert!(
        status.is_some_and(|s| !s.success()),
        "the second c1 must stop with an error: {status:?}\n{said}"
    );
    assert!(
        said.contains("another live collector is named `c1`"),
        "{said}"
    );
    assert_eq!(owned(port), 4.0, "c1 still owns every partition");
    // c1 killed: a new run under its name is its successor, not a duplicate.
    drop(first);
    let after = d.join("after");
    std::fs::create_dir_all(&after).expect("dir");
    let (mut third, port3) = collector(&after, &url, "c1", "4", "100");
    wait_for(
        "the restarted c1 to own every partition",
        Duration::from_secs(30),
        || owned(port3) == 4.0,
    );
    assert!(third.wait_exit(Duration::ZERO).is_none(), "it runs on");
}

#[test]
fn what_retryscope_creates_has_the_replicas_and_retention_asked_for() {
    if !have_nats_server() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let d = d.path();
    let (_server, url) = server_in(d);
    let log = d.join("agent.jsonl");
    append(&log, &refund_log("ret", 2, 10).0);
    let _ship = shipper_with(d, &url, &log, "2", &["--nats-events-max-age-hours", "2"]);
    let (_c, port) = collector_with(
        d,
        &url,
        "c1",
        "2",
        "100",
        &["--nats-findings-max-age-hours", "3"],
    );
    wait_for("c1 to own partitions", Duration::from_secs(30), || {
        owned(port) > 0.0
    });
    let configs = with_js(&url, async |js| {
        let mut out = Vec::new();
        for name in [
            "RETRYSCOPE_EVENTS",
            "RETRYSCOPE_FINDINGS",
            "KV_retryscope_owners",
            "KV_retryscope_state",
        ] {
            let mut s = js.get_stream(name).await.expect(name);
            let c = s.info().await.expect("info").config.clone();
            out.push((name, c.num_replicas, c.max_age));
        }
        out
    });
    assert_eq!(
        configs,
        vec![
            ("RETRYSCOPE_EVENTS", 1, Duration::from_secs(7200)),
            ("RETRYSCOPE_FINDINGS", 1, Duration::from_secs(3 * 3600)),
            ("KV_retryscope_owners", 1, Duration::ZERO),
            ("KV_retryscope_state", 1, Duration::ZERO),
        ]
    );
    // Three replicas on one server: the server's refusal, named, and a stop.
    let lone_dir = d.join("lone");
    std::fs::create_dir_all(&lone_dir).expect("dir");
    let (_lone, lone) = server_in(&lone_dir);
    let mut ship3 = shipper_with(&lone_dir, &lone, &log, "2", &["--nats-replicas", "3"]);
    let status = ship3.wait_exit(Duration::from_secs(30));
    let said = log_text(&lone_dir, "ship");
    assert!(status.is_some_and(|s| !s.success()), "{status:?}: {said}");
    assert!(said.contains("creating the events stream"), "{said}");
}

#[test]
fn deployment_flags_are_refused_where_they_cannot_apply_or_their_files_are_missing() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("retryscope");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, err) = run(&["run", "--demo", "--nats-replicas", "3"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--nats-replicas applies only with --nats"),
        "{err}"
    );
    let (code, err) = run(&[
        "ship",
        "-",
        "--nats",
        "nats://127.0.0.1:1",
        "--nats-replicas",
        "7",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("1 to 5"), "{err}");
    // A file a flag names that cannot be read stops `ship` before it connects.
    for (flag, file) in [
        ("--nats-ca", "/nonexistent/ca.pem"),
        ("--nats-creds", "/nonexistent/user.creds"),
    ] {
        let (code, err) = run(&["ship", "-", "--nats", "nats://127.0.0.1:1", flag, file]);
        assert_ne!(code, Some(0), "{flag}: {err}");
        assert!(err.contains(file), "{flag}: {err}");
    }
}

/// Issue 26: five collectors on sixteen partitions all work (4, 3, 3, 3, 3); with a share of
/// ⌈16/5⌉ = 4 for everyone the split was uneven (2, 3, 3, 4, 4 here) and could leave one
/// collector with none.
#[test]
fn five_collectors_on_sixteen_partitions_each_own_some() {
    if !have_nats_server() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let d = d.path();
    let (_server, url, _ship) = shipped(d, "share", 4, "16");
    let collectors: Vec<_> = (0..5)
        .map(|i| collector(d, &url, &format!("c{i}"), "4", "100"))
        .collect();
    let counts = || -> Vec<f64> {
        let mut c: Vec<f64> = collectors.iter().map(|(_, port)| owned(*port)).collect();
        c.sort_by(f64::total_cmp);
        c
    };
    // Settled on the fair shares: the same counts on three scrapes in a row. A partition
    // being handed over counts at its old owner until its last checkpoint is stored (after
    // the take it may still be in): counts that stand still for a second are not settled
    // yet unless they are the fair shares; a partition left unread would never get there.
    let fair = vec![3.0, 3.0, 3.0, 3.0, 4.0];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = vec![counts()];
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        seen.push(counts());
        if seen.len() >= 3 && seen[seen.len() - 3..].iter().all(|c| *c == fair) {
            break;
        }
    }
    assert_eq!(
        seen.last(),
        Some(&fair),
        "partitions owned per collector, scrape by scrape: {seen:?}"
    );
}

/// A NATS operator-mode trust chain made as `nsc` makes one: an operator, accounts it signs
/// and users they sign, as JWTs signed with nkeys (the claim layout of nats-io/jwt v2:
/// `header.claims.signature`, each part base64url without padding, the signature ed25519 over
/// the first two parts).
mod operator_mode {
    use nkeys::KeyPair;
    use serde_json::{Value, json};
    use sha2::Digest as _;

    fn b64(bytes: &[u8]) -> String {
        data_encoding::BASE64URL_NOPAD.encode(bytes)
    }

    /// A JWT of the claims `nats` about `subject`, signed by `issuer`.
    fn jwt(issuer: &KeyPair, subject: &str, name: &str, nats: Value) -> String {
        let header = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
        let iat = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs();
        let mut claims = json!({
            "iat": iat,
            "iss": issuer.public_key(),
            "name": name,
            "sub": subject,
            "nats": nats,
        });
        // The id: a hash of the claims without it (SHA-512/256, base32), as nats-io/jwt has it.
        let hash = sha2::Sha512_256::digest(claims.to_string().as_bytes());
        claims["jti"] = data_encoding::BASE32_NOPAD.encode(&hash).into();
        let signed = format!("{header}.{}", b64(claims.to_string().as_bytes()));
        let signature = issuer.sign(signed.as_bytes()).expect("sign");
        format!("{signed}.{}", b64(&signature))
    }

    /// An operator: its key and its self-signed JWT.
    pub fn operator(name: &str) -> (KeyPair, String) {
        let key = KeyPair::new_operator();
        let token = jwt(
            &key,
            &key.public_key(),
            name,
            json!({"type": "operator", "version": 2}),
        );
        (key, token)
    }

    /// An account signed by `operator`, with JetStream enabled if `jetstream`: its key and JWT.
    pub fn account(operator: &KeyPair, name: &str, jetstream: bool) -> (KeyPair, String) {
        let key = KeyPair::new_account();
        let mut limits = json!({
            "subs": -1, "data": -1, "payload": -1,
            "imports": -1, "exports": -1, "wildcards": true, "conn": -1, "leaf": -1,
        });
        if jetstream {
            for k in ["mem_storage", "disk_storage", "streams", "consumer"] {
                limits[k] = json!(-1);
            }
        }
        let token = jwt(
            operator,
            &key.public_key(),
            name,
            json!({
                "limits": limits,
                "default_permissions": {"pub": {}, "sub": {}},
                "type": "account",
                "version": 2,
            }),
        );
        (key, token)
    }

    /// A user of `account` (signed with the account's own key, so no `issuer_account`),
    /// allowed to publish and subscribe anywhere, as a credentials file's text.
    pub fn user_creds(account: &KeyPair, name: &str) -> String {
        let key = KeyPair::new_user();
        let token = jwt(
            account,
            &key.public_key(),
            name,
            json!({
                "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                "type": "user", "version": 2,
            }),
        );
        let seed = key.seed().expect("seed");
        format!(
            "-----BEGIN NATS USER JWT-----\n{token}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n"
        )
    }
}

/// Issue 26: `--nats-creds` against a server in operator mode (JWT accounts, the memory
/// resolver): a shipper and a collector log in with a user's credentials file, and the
/// findings stream holds what `check` finds; a user of an account the server does not know is
/// refused, and `ship` and `run` stop with the server's reason instead of retrying forever.
#[test]
fn an_operator_mode_server_is_reached_with_a_creds_file_and_a_stranger_is_refused() {
    if !have_nats_server() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let d = d.path();
    let (operator, operator_jwt) = operator_mode::operator("retryscope-test");
    let (system, system_jwt) = operator_mode::account(&operator, "SYS", false);
    let (app, app_jwt) = operator_mode::account(&operator, "APP", true);
    let creds = d.join("app.creds");
    let creds_text = operator_mode::user_creds(&app, "retryscope");
    std::fs::write(&creds, &creds_text).expect("creds");
    // A user of another operator's account: well formed, unknown to this server.
    let (other, _) = operator_mode::operator("elsewhere");
    let (stranger_account, _) = operator_mode::account(&other, "STRANGER", true);
    let stranger = d.join("stranger.creds");
    std::fs::write(
        &stranger,
        operator_mode::user_creds(&stranger_account, "stranger"),
    )
    .expect("creds");
    let conf = d.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "operator: {operator_jwt}\n\
             system_account: {sys}\n\
             resolver: MEMORY\n\
             resolver_preload: {{\n  {sys}: {system_jwt}\n  {app_pk}: {app_jwt}\n}}\n",
            sys = system.public_key(),
            app_pk = app.public_key(),
        ),
    )
    .expect("conf");
    let port = free_port();
    let _server = nats_server_with(
        port,
        &d.join("js"),
        &d.join("nats.log"),
        &["-c", &conf.display().to_string()],
    );
    let url = format!("nats://127.0.0.1:{port}");
    let creds_arg = creds.display().to_string();

    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("jwt", 20, 10);
    append(&log, &first);
    append(&log, &second);

    // Refused: the stranger's shipper and collector stop, saying why.
    let stranger_dir = d.join("stranger");
    std::fs::create_dir_all(&stranger_dir).expect("dir");
    let stranger_arg = ["--nats-creds", &stranger.display().to_string()].map(String::from);
    let stranger_arg: Vec<&str> = stranger_arg.iter().map(String::as_str).collect();
    let ship = shipper_with(&stranger_dir, &url, &log, "2", &stranger_arg);
    let (run, _) = collector_with(&stranger_dir, &url, "c1", "2", "100", &stranger_arg);
    for (name, mut p) in [("ship", ship), ("c1", run)] {
        let status = p.wait_exit(Duration::from_secs(30));
        let said = log_text(&stranger_dir, name);
        assert!(
            status.is_some_and(|s| !s.success()),
            "{name} with an unknown user must stop with an error, not retry: {status:?}\n{said}"
        );
        assert!(
            said.contains("refused") && said.contains("authorization violation"),
            "{name} says the server refused the credentials, and its reason: {said}"
        );
    }

    let empty = d.join("empty.jsonl");
    std::fs::write(&empty, "").expect("empty");
    let (expected, _) = check(&log, &empty);
    assert!(!expected.is_empty());
    let _ship = shipper_with(d, &url, &log, "4", &["--nats-creds", &creds_arg]);
    let (_c, mport) = collector_with(d, &url, "c1", "2", "100", &["--nats-creds", &creds_arg]);
    // The findings stream, read back as the same user.
    let options = || {
        async_nats::ConnectOptions::new()
            .credentials(&creds_text)
            .expect("creds parse")
    };
    let got = settled_findings_using(&url, options, expected.len(), Duration::from_secs(60));
    assert_eq!(
        got.len(),
        expected.len(),
        "the collector with --nats-creds finds what check finds (ship: {}; collector: {}; \
         server: {})",
        log_text(d, "ship"),
        log_text(d, "c1"),
        log_text(d, "nats")
    );
    assert_eq!(got, expected);
    assert!(owned(mport) > 0.0);
}

/// A server that comes up after `ship` and `run --nats` started: they wait for it (and stop
/// at once when told to meanwhile); a right user then ships, and a wrong password is refused
/// and stops them with the server's reason. They retried the refusal for ever (`run`), or
/// until their first requests timed out (`ship`, ~30 s, saying only that).
#[test]
fn a_server_that_comes_up_late_and_refuses_the_login_stops_ship_and_run_with_its_reason() {
    if !have_nats_server() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let d = d.path();
    let port = free_port();
    let right = format!("nats://collector:s3cret@127.0.0.1:{port}");
    let wrong = format!("nats://collector:wrong@127.0.0.1:{port}");
    let log = d.join("agent.jsonl");
    append(&log, &refund_log("late", 2, 10).0);
    let dirs = ["wrong", "right", "stopped"].map(|n| {
        let dir = d.join(n);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    });
    let [wrong_dir, right_dir, stopped_dir] = &dirs;
    let ship = shipper(wrong_dir, &wrong, &log, "2");
    let (run, _) = collector(wrong_dir, &wrong, "c1", "2", "100");
    let _right_ship = shipper(right_dir, &right, &log, "2");
    let stopped = shipper(stopped_dir, &right, &log, "2");
    wait_for(
        "every client to wait for NATS",
        Duration::from_secs(30),
        || {
            [
                (wrong_dir, "ship"),
                (wrong_dir, "c1"),
                (right_dir, "ship"),
                (stopped_dir, "ship"),
            ]
            .into_iter()
            .all(|(dir, name)| log_text(dir, name).contains("NATS not reachable yet"))
        },
    );
    // Told to stop while waiting: it stops, and well.
    let status = stopped.terminate();
    assert!(
        status.success(),
        "{status:?}: {}",
        log_text(stopped_dir, "ship")
    );

    let _server = nats_server_with(
        port,
        &d.join("js"),
        &d.join("nats.log"),
        &["--user", "collector", "--pass", "s3cret"],
    );
    for (name, mut p) in [("ship", ship), ("c1", run)] {
        let status = p.wait_exit(Duration::from_secs(15));
        let said = log_text(wrong_dir, name);
        assert!(
            status.is_some_and(|s| !s.success()),
            "{name} with a wrong password must stop with an error once the server is up, not \
             retry: {status:?}\n{said}"
        );
        assert!(
            said.contains("the server refused the credentials")
                && said.contains("authorization violation"),
            "{name} says the server refused the credentials, and its reason: {said}"
        );
    }
    // The right user, waiting as long, got in: its events stream is there.
    let options =
        || async_nats::ConnectOptions::new().user_and_password("collector".into(), "s3cret".into());
    let url = format!("nats://127.0.0.1:{port}");
    wait_for(
        "the right user's events stream",
        Duration::from_secs(15),
        || {
            with_js_using(&url, options(), async |js| {
                js.get_stream("RETRYSCOPE_EVENTS").await.is_ok()
            })
        },
    );
}
