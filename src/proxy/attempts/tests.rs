use super::*;

#[test]
fn same_history_after_a_cut_is_a_retry() {
    let mut t = Tracker::new(Box::new(Vec::<Vec<u8>>::new()), "px".to_owned());
    let req = super::super::history::parse(
        Api::Anthropic,
        "/v1/messages",
        br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    );
    let a = t.begin(Api::Anthropic, req.as_ref(), None, 1);
    t.end(&a, &End::ClientGone, 2);
    let b = t.begin(Api::Anthropic, req.as_ref(), None, 3);
    assert_eq!((b.turn.as_str(), b.attempt), ("px-1", 1));
    assert_eq!(t.stats().retries, 1);
}
