//! Which store a shared index and a bucket location belong to, checked on every start.
//!
//! A shared store is two things that must match: the records in PostgreSQL and the blobs under
//! `<bucket>/<prefix>`. One instance started with a wrong prefix, against an empty bucket, or
//! against a stale copy of the bucket would otherwise see the blobs stored since as missing and
//! drop the fleet's records, or store blobs where the rest of the fleet never looks. So the
//! first instance to start records a store id, its blob location and a generation in the
//! index's settings and writes the same id and generation into a marker object under the
//! prefix (`stowage-store.json`). Every start compares the two and then advances the generation
//! in both (marker first), as every running instance does every half minute: a copy of the
//! bucket keeps the generation it was made at and falls behind at once, so it is refused, and
//! an instance whose location falls behind stops taking puts. Moving a store to another
//! location is an operator's act (`stowage artifacts relocate`), never a start's.
//!
//! The store also records the fingerprints of the link-signing keys its instances sign with:
//! an instance with another secret under a key id, or with none of the fleet's keys, would mint
//! links the others refuse, and is refused at start.
//!
//! [`decide`] and [`check_keys`] are the whole rule, pure so they are tested case by case;
//! `crate::shared` reads what they need and acts on the decision (or, for `check-config`, only
//! reports it).

use std::collections::BTreeMap;

/// The identity the index records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recorded<'a> {
    pub id: &'a str,
    /// The blob location, as [`describe_location`] wrote it.
    pub location: &'a str,
    /// 0 for an index made before generations.
    pub generation: u64,
}

/// What the marker at a location says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MarkerSeen<'a> {
    pub id: &'a str,
    /// 0 for a marker written before generations.
    pub generation: u64,
}

/// What a start found: the identity the index records, the marker at this instance's
/// location, and how many of the newest records' blobs are there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen<'a> {
    pub recorded: Option<Recorded<'a>>,
    pub marker: Option<MarkerSeen<'a>>,
    /// This instance's blob location, as [`describe_location`] writes it.
    pub here: &'a str,
    /// The index, for messages (`postgres://host:port/db schema stowage`).
    pub index: &'a str,
    /// Newest records whose blobs were looked for at `here` (0: the index holds none, or the
    /// check was not needed), and how many of them were found.
    pub sampled: usize,
    pub present: usize,
}

/// What to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The marker names the store the index records, at its generation (or one ahead: an
    /// advance that wrote the marker and stopped before the index).
    Matches,
    /// Neither records a store yet, and nothing says this location is wrong: record a new id
    /// in the index, then write the marker.
    Claim,
    /// The index's location is exactly this one and its blobs are here, but the marker is gone
    /// (deleted by hand, or a start that stopped between the two writes): write it again.
    RestoreMarker,
    /// Refuse to start, with this one-line reason naming both locations.
    Refuse(String),
}

/// Whether the blobs found are enough to take a location as the one the records were stored
/// at: three in four of the newest records' blobs at least. Blobs are content addresses, so
/// another store that holds some of the same bytes holds some of the same keys; one or two
/// found prove nothing.
pub(crate) fn enough_present(sampled: usize, present: usize) -> bool {
    sampled == 0 || present * 4 >= sampled * 3
}

/// The rule (see the module docs).
pub(crate) fn decide(s: &Seen<'_>) -> Decision {
    let Seen { here, index, sampled, present, .. } = *s;
    match (s.recorded, s.marker) {
        (Some(rec), Some(m)) if m.id == rec.id => {
            let Recorded { id, location, generation } = rec;
            if location != here {
                Decision::Refuse(format!(
                    "{here} holds a copy of store {id}, whose blobs are at {location} (index {index}): point [store] bucket, prefix and endpoint at {location}; if the store moved here, stop every instance and run stowage artifacts relocate with this configuration (docs/deploy.md, moving a bucket)"
                ))
            } else if m.generation < generation {
                Decision::Refuse(format!(
                    "{here} holds an older copy of store {id} (generation {}, while index {index} is at {generation}): the bucket was copied or restored from before the store's last start, and what was stored since is not in it; point [store] at the store's current bucket, or restore that one (docs/deploy.md, moving a bucket)",
                    m.generation
                ))
            } else if m.generation > generation + 1 {
                Decision::Refuse(format!(
                    "{here} is at generation {} of store {id}, ahead of index {index} (generation {generation}): the index was restored from an older backup, or the store's other instances use another database; point [index] at the store's current database and schema",
                    m.generation
                ))
            } else {
                Decision::Matches
            }
        }
        (Some(rec), Some(m)) => Decision::Refuse(format!(
            "{here} holds the blobs of store {}, but index {index} belongs to store {} (blobs at {}): point [store] at {}, or [index] at store {}'s database and schema",
            m.id, rec.id, rec.location, rec.location, m.id
        )),
        (Some(rec), None) if rec.location == here && enough_present(sampled, present) => Decision::RestoreMarker,
        (Some(rec), None) if rec.location == here => Decision::Refuse(format!(
            "index {index} belongs to store {} with blobs at {here}, but the store's marker is gone from there and only {present} of the {sampled} newest records' blobs are: the bucket looks emptied or replaced; restore it, or start the store over as docs/deploy.md says",
            rec.id
        )),
        (Some(rec), None) => Decision::Refuse(format!(
            "this instance's blobs would go to {here}, but index {index} belongs to store {}, whose blobs are at {}: set [store] bucket, prefix and endpoint to those of {}, or give this store its own [index] schema",
            rec.id, rec.location, rec.location
        )),
        (None, Some(m)) => Decision::Refuse(format!(
            "{here} already holds the blobs of store {}, but index {index} records no store: point [index] at store {}'s database and schema, or use another [store] prefix",
            m.id, m.id
        )),
        (None, None) if !enough_present(sampled, present) => Decision::Refuse(format!(
            "index {index} holds records, but only {present} of the {sampled} newest records' blobs are at {here}: set [store] bucket, prefix and endpoint to where they were stored"
        )),
        (None, None) => Decision::Claim,
    }
}

/// The store's record of its link-signing keys: key id → fingerprint
/// (`stowage_links::KeyRing::fingerprints`), as the `link_keys` setting holds it (JSON).
pub(crate) type KeyPrints = BTreeMap<String, String>;

/// Whether an instance signing with `mine` (id, fingerprint; signing key first) may join a
/// store whose instances recorded `recorded`: no key id may have another secret than the one
/// recorded, and one key at least must be the fleet's (an empty record takes anything). `Err`
/// is the one-line refusal; `Ok` the record to keep (with this instance's new keys added:
/// rotation adds a key on every instance before it signs).
pub(crate) fn check_keys(recorded: &KeyPrints, mine: &[(String, String)], store: &str) -> Result<KeyPrints, String> {
    for (id, print) in mine {
        if let Some(theirs) = recorded.get(id).filter(|t| *t != print) {
            return Err(format!(
                "link-signing key {id:?} of this instance has another secret than store {store}'s other instances sign with (fingerprint {print}, theirs {theirs}): its links would fail on them and theirs on it; give every instance the same [links] keys secrets (docs/deploy.md, signing keys)"
            ));
        }
    }
    if !recorded.is_empty() && !mine.iter().any(|(id, _)| recorded.contains_key(id)) {
        let ours: Vec<&str> = mine.iter().map(|(id, _)| id.as_str()).collect();
        let theirs: Vec<&str> = recorded.keys().map(String::as_str).collect();
        return Err(format!(
            "none of this instance's link-signing keys ({}) is one store {store}'s other instances use ({}): its links would fail on them and theirs on it; give every instance the same [links] keys (docs/deploy.md, signing keys)",
            ours.join(", "),
            theirs.join(", ")
        ));
    }
    let mut kept = recorded.clone();
    kept.extend(mine.iter().cloned());
    Ok(kept)
}

/// `s3://bucket/prefix`, with ` at <endpoint>` for a compatible or local service: what the
/// index records and messages name.
pub(crate) fn describe_location(scheme: &str, bucket: &str, prefix: &str, endpoint: Option<&str>) -> String {
    let mut out = format!("{scheme}://{bucket}");
    if !prefix.is_empty() {
        out.push('/');
        out.push_str(prefix);
    }
    if let Some(e) = endpoint {
        out.push_str(" at ");
        out.push_str(e.trim_end_matches('/'));
    }
    out
}

/// A new store id: 16 random bytes as hex.
pub(crate) fn new_store_id() -> String {
    hex::encode(crate::blobs::random_bytes::<16>())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HERE: &str = "s3://b/stowage at http://127.0.0.1:9000";
    const OTHER: &str = "s3://b/wrong at http://127.0.0.1:9000";

    fn rec(id: &'static str, location: &'static str, generation: u64) -> Option<Recorded<'static>> {
        Some(Recorded { id, location, generation })
    }

    fn marker(id: &'static str, generation: u64) -> Option<MarkerSeen<'static>> {
        Some(MarkerSeen { id, generation })
    }

    fn seen<'a>(recorded: Option<Recorded<'a>>, marker: Option<MarkerSeen<'a>>, sampled: usize, present: usize) -> Seen<'a> {
        Seen { recorded, marker, here: HERE, index: "postgres://db:5432/x schema stowage", sampled, present }
    }

    fn refusal(s: Seen<'_>) -> String {
        match decide(&s) {
            Decision::Refuse(why) => why,
            other => panic!("want a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_recorded_location_at_its_generation_matches() {
        assert_eq!(decide(&seen(rec("id1", HERE, 7), marker("id1", 7), 0, 0)), Decision::Matches);
        // An advance that wrote the marker and stopped before the index.
        assert_eq!(decide(&seen(rec("id1", HERE, 7), marker("id1", 8), 0, 0)), Decision::Matches);
        // Both from before generations.
        assert_eq!(decide(&seen(rec("id1", HERE, 0), marker("id1", 0), 0, 0)), Decision::Matches);
    }

    #[test]
    fn a_copy_elsewhere_is_refused_and_told_how_to_move_the_store() {
        // Another bucket, prefix or endpoint holding the store's marker: a copy, however fresh.
        let mut s = seen(rec("id1", OTHER, 7), marker("id1", 7), 0, 0);
        let why = refusal(s);
        assert!(why.contains(&format!("{HERE} holds a copy of store id1, whose blobs are at {OTHER}")), "{why}");
        assert!(why.contains("stowage artifacts relocate") && !why.contains('\n'), "{why}");
        s.here = OTHER;
        assert_eq!(decide(&s), Decision::Matches);
    }

    #[test]
    fn a_stale_copy_at_the_same_location_is_refused() {
        let why = refusal(seen(rec("id1", HERE, 9), marker("id1", 7), 0, 0));
        assert!(why.contains("older copy of store id1 (generation 7, while index") && why.contains("is at 9"), "{why}");
        let why = refusal(seen(rec("id1", HERE, 3), marker("id1", 9), 0, 0));
        assert!(why.contains("ahead of index") && why.contains("restored from an older backup"), "{why}");
    }

    #[test]
    fn a_fresh_store_is_claimed_and_an_upgraded_one_only_where_most_of_its_blobs_are() {
        assert_eq!(decide(&seen(None, None, 0, 0)), Decision::Claim);
        assert_eq!(decide(&seen(None, None, 8, 8)), Decision::Claim);
        assert_eq!(decide(&seen(None, None, 8, 6)), Decision::Claim);
        // One of eight (a bucket that happens to hold the same bytes) is no proof.
        let why = refusal(seen(None, None, 8, 1));
        assert!(why.contains("only 1 of the 8 newest records' blobs are at") && why.contains(HERE), "{why}");
        assert!(matches!(decide(&seen(None, None, 8, 5)), Decision::Refuse(_)));
        assert!(matches!(decide(&seen(None, None, 2, 1)), Decision::Refuse(_)));
        assert_eq!(decide(&seen(None, None, 1, 1)), Decision::Claim);
    }

    #[test]
    fn a_wrong_prefix_or_an_empty_bucket_is_refused_naming_both_locations() {
        let why = refusal(seen(rec("id1", OTHER, 1), None, 8, 0));
        assert!(why.contains(HERE) && why.contains(OTHER) && why.contains("store id1"), "{why}");
        assert!(!why.contains('\n'));
        // Even when the wrong location happens to hold some of the same bytes.
        assert!(matches!(decide(&seen(rec("id1", OTHER, 1), None, 8, 8)), Decision::Refuse(_)));
    }

    #[test]
    fn another_stores_marker_is_refused() {
        let why = refusal(seen(rec("id1", OTHER, 1), marker("id2", 1), 0, 0));
        assert!(why.contains("store id2") && why.contains("store id1"), "{why}");
        let why = refusal(seen(None, marker("id2", 4), 0, 0));
        assert!(why.contains("records no store") && why.contains("another [store] prefix"), "{why}");
    }

    #[test]
    fn a_lost_marker_is_restored_only_where_most_blobs_are() {
        assert_eq!(decide(&seen(rec("id1", HERE, 2), None, 8, 7)), Decision::RestoreMarker);
        assert_eq!(decide(&seen(rec("id1", HERE, 2), None, 0, 0)), Decision::RestoreMarker);
        let why = refusal(seen(rec("id1", HERE, 2), None, 8, 1));
        assert!(why.contains("emptied or replaced") && why.contains("only 1 of the 8"), "{why}");
    }

    fn prints(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    #[test]
    fn a_key_with_another_secret_or_none_of_the_fleets_keys_is_refused() {
        let none = KeyPrints::new();
        let first = check_keys(&none, &prints(&[("k1", "aaaa")]), "s1").unwrap();
        assert_eq!(first, KeyPrints::from([("k1".to_owned(), "aaaa".to_owned())]));
        // The same key: fine, nothing new.
        assert_eq!(check_keys(&first, &prints(&[("k1", "aaaa")]), "s1").unwrap(), first);
        // The same id, another secret: refused in one line naming the key.
        let why = check_keys(&first, &prints(&[("k1", "bbbb")]), "s1").unwrap_err();
        assert!(why.starts_with("link-signing key \"k1\" of this instance has another secret than store s1's"), "{why}");
        assert!(why.contains("bbbb") && why.contains("aaaa") && !why.contains('\n'), "{why}");
        // No key in common.
        let why = check_keys(&first, &prints(&[("k9", "cccc")]), "s1").unwrap_err();
        assert!(why.contains("none of this instance's link-signing keys (k9)") && why.contains("(k1)"), "{why}");
        // Rotation: a new key added beside the old one is recorded; the old one may go later.
        let rotated = check_keys(&first, &prints(&[("k2", "dddd"), ("k1", "aaaa")]), "s1").unwrap();
        assert_eq!(rotated.len(), 2);
        assert!(check_keys(&rotated, &prints(&[("k2", "dddd")]), "s1").is_ok());
    }

    #[test]
    fn locations_are_described_with_their_endpoint() {
        assert_eq!(describe_location("s3", "b", "", None), "s3://b");
        assert_eq!(describe_location("az", "c", "p/q", Some("http://h:1/acct/")), "az://c/p/q at http://h:1/acct");
    }
}
