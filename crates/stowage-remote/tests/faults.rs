//! `RemoteStore` under injected faults: a lost answer is resolved by reading back, a failed
//! request is retried or reported by name, a body cut short is never returned as data.

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use stowage_core::Error;
use stowage_core::bytes::Bytes;
use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};
use stowage_remote::{Created, RemoteStore, RemoteUrl};

fn faulty_store() -> (RemoteStore, Arc<FaultyStore>) {
    let faulty = FaultyStore::new(Arc::new(InMemory::new()));
    (faulty.store(RemoteUrl::parse("memory://faults/cache").unwrap()), faulty)
}

fn manifest() -> Bytes {
    Bytes::from_static(b"{\"version\": 1}")
}

#[test]
fn a_put_whose_answer_is_lost_is_found_by_reading_back_and_not_sent_again() {
    let (store, faulty) = faulty_store();
    faulty.inject(Rule::once(Operation::Put, "versions/1", Fault::LoseResponse));
    assert_eq!(store.put_new("versions/1", manifest()).unwrap(), Created::AlreadyThere);
    assert_eq!(faulty.count(Operation::Put), 1, "{:?}", faulty.requests());
    assert_eq!(faulty.count(Operation::Get), 1, "one read back: {:?}", faulty.requests());
    assert_eq!(store.get("versions/1").unwrap(), manifest());
}

#[test]
fn a_put_that_failed_before_taking_effect_is_sent_again_after_looking() {
    for fault in [Fault::Unavailable, Fault::Conflict] {
        let (store, faulty) = faulty_store();
        faulty.inject(Rule::once(Operation::Put, "versions/1", fault).times(2));
        assert_eq!(store.put_new("versions/1", manifest()).unwrap(), Created::New, "{fault:?}");
        assert_eq!(faulty.count(Operation::Put), 3, "{fault:?}: {:?}", faulty.requests());
        assert_eq!(store.get("versions/1").unwrap(), manifest());
    }
}

#[test]
fn a_put_that_keeps_failing_is_an_error_naming_the_object_and_leaves_nothing() {
    let (store, faulty) = faulty_store();
    faulty.inject(Rule::once(Operation::Put, "", Fault::Unavailable).times(100));
    let err = store.put_new("versions/1", manifest()).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("memory://faults/cache/versions/1") && text.contains("503"), "{text}");
    assert_eq!(store.head("versions/1").unwrap(), None);
}

#[test]
fn a_lost_answer_over_another_writers_object_is_a_conflict_not_a_success() {
    let (store, faulty) = faulty_store();
    store.put_new("versions/1", Bytes::from_static(b"theirs")).unwrap();
    // Our put is refused by the condition, and the refusal is lost: reading back finds other
    // bytes, which is a lost race, never "created".
    faulty.inject(Rule::once(Operation::Put, "versions/1", Fault::LoseResponse));
    let err = store.put_new("versions/1", manifest()).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert_eq!(store.get("versions/1").unwrap().as_ref(), b"theirs");
}

#[test]
fn a_body_cut_short_is_retried_and_never_returned_as_data() {
    let (store, faulty) = faulty_store();
    let data = Bytes::from(vec![7u8; 4096]);
    store.put_new("objects/a", data.clone()).unwrap();

    faulty.inject(Rule::once(Operation::Get, "objects/a", Fault::TruncateBody { keep: 10 }));
    assert_eq!(store.get_range("objects/a", 100..1100).unwrap(), data.slice(100..1100));
    faulty.inject(Rule::once(Operation::Get, "objects/a", Fault::TruncateBody { keep: 0 }));
    assert_eq!(store.get("objects/a").unwrap(), data);

    faulty.inject(
        Rule::once(Operation::Get, "objects/a", Fault::TruncateBody { keep: 3 }).times(100),
    );
    for result in [
        store.get_range("objects/a", 0..100),
        store.get("objects/a"),
        store.get_ranges("objects/a", &[0..10, 2000..2100]).map(|parts| parts.concat().into()),
    ] {
        let err = result.unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof),
            "{err}"
        );
        assert!(err.to_string().contains("objects/a"), "{err}");
    }
}

#[test]
fn slow_requests_still_answer_and_every_request_is_logged() {
    let (store, faulty) = faulty_store();
    faulty.inject(Rule::once(Operation::Put, "", Fault::Slow(Duration::from_millis(50))));
    store.put_new("objects/a", Bytes::from_static(b"abc")).unwrap();
    // Two ranges far apart are two requests; two neighbours coalesce into one.
    let far = 2 * object_store::OBJECT_STORE_COALESCE_DEFAULT;
    store.put_new("objects/big", Bytes::from(vec![1u8; far as usize + 10])).unwrap();
    faulty.clear_log();
    store.get_ranges("objects/big", &[0..10, far..far + 10]).unwrap();
    assert_eq!(faulty.count(Operation::Get), 2, "{:?}", faulty.requests());
    faulty.clear_log();
    store.get_ranges("objects/big", &[0..10, 20..30]).unwrap();
    assert_eq!(faulty.count(Operation::Get), 1, "{:?}", faulty.requests());
    let requests = faulty.requests();
    assert!(requests.iter().all(|r| r.path == "cache/objects/big" && r.fault.is_none()));
}

#[test]
fn ranges_of_several_objects_are_exact_even_when_one_body_is_cut_short() {
    let (store, faulty) = faulty_store();
    let a = Bytes::from_static(b"0123456789abcdefghij");
    let b = Bytes::from_static(b"ABCDEFGHIJKLMNOPQRST");
    store.put_new("objects/a", a.clone()).unwrap();
    store.put_new("objects/b", b.clone()).unwrap();
    faulty.clear_log();
    faulty.inject(Rule::once(Operation::Get, "objects/b", Fault::TruncateBody { keep: 1 }));
    let in_a = [0..2, 18..20];
    let in_b = std::slice::from_ref(&(5..9));
    let got = store.get_ranges_of(&[("objects/a", &in_a), ("objects/b", in_b)]).unwrap();
    assert_eq!(got, [vec![a.slice(0..2), a.slice(18..20)], vec![b.slice(5..9)]]);
    // One round of two requests (a's ranges share one), then both again after the short body.
    assert_eq!(faulty.count(Operation::Get), 4, "{:?}", faulty.requests());
}

#[test]
fn a_listing_that_fails_once_is_tried_again() {
    let (store, faulty) = faulty_store();
    store.put_new("versions/a", manifest()).unwrap();
    faulty.inject(Rule::once(Operation::List, "versions", Fault::Unavailable));
    let listed = store.list("versions").unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(faulty.count(Operation::List), 2, "{:?}", faulty.requests());
    faulty.inject(Rule::once(Operation::List, "versions", Fault::Unavailable).times(3));
    let err = store.list_after("versions", "versions/0").unwrap_err().to_string();
    assert!(err.contains("memory://faults/cache/versions"), "{err}");
}
