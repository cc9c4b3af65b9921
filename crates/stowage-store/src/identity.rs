//! Which store a shared index and a bucket location belong to, checked on every start.
//!
//! A shared store is two things that must match: the records in PostgreSQL and the blobs under
//! `<bucket>/<prefix>`. One instance started with a wrong prefix, or against an empty bucket,
//! would otherwise see every record's blob as missing and drop the fleet's records. So the
//! first instance to start records a store id and its blob location in the index's settings
//! and writes the same id into a marker object under the prefix (`stowage-store.json`); every
//! start compares the two, and gc verifies the marker before judging any blob.
//!
//! [`decide`] is the whole rule, pure so it is tested case by case; `crate::shared` reads what
//! it needs and acts on the decision (or, for `check-config`, only reports it).

/// What a start found: the identity the index records, the marker at this instance's
/// location, and how many of the newest records' blobs are there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen<'a> {
    /// `(store id, blob location)` recorded in the index.
    pub recorded: Option<(&'a str, &'a str)>,
    /// The store id in the marker at this instance's location.
    pub marker: Option<&'a str>,
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
    /// The marker names the store the index records.
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

/// The rule (see the module docs).
pub(crate) fn decide(s: &Seen<'_>) -> Decision {
    let Seen { here, index, sampled, present, .. } = *s;
    match (s.recorded, s.marker) {
        (Some((id, _)), Some(marker)) if marker == id => Decision::Matches,
        (Some((id, location)), Some(marker)) => Decision::Refuse(format!(
            "{here} holds the blobs of store {marker}, but index {index} belongs to store {id} (blobs at {location}): point [store] at {location}, or [index] at store {marker}'s database and schema"
        )),
        (Some((_, location)), None) if location == here && (sampled == 0 || present > 0) => Decision::RestoreMarker,
        (Some((id, _)), None) if s.recorded.is_some_and(|(_, l)| l == here) => Decision::Refuse(format!(
            "index {index} belongs to store {id} with blobs at {here}, but the store's marker is gone from there and none of the {sampled} newest records' blobs is: the bucket looks emptied or replaced; restore it, or start the store over as docs/deploy.md says"
        )),
        (Some((id, location)), None) => Decision::Refuse(format!(
            "this instance's blobs would go to {here}, but index {index} belongs to store {id}, whose blobs are at {location}: set [store] bucket, prefix and endpoint to those of {location}, or give this store its own [index] schema"
        )),
        (None, Some(marker)) => Decision::Refuse(format!(
            "{here} already holds the blobs of store {marker}, but index {index} records no store: point [index] at store {marker}'s database and schema, or use another [store] prefix"
        )),
        (None, None) if sampled > 0 && present == 0 => Decision::Refuse(format!(
            "index {index} holds records, but none of the {sampled} newest records' blobs is at {here}: set [store] bucket, prefix and endpoint to where they were stored"
        )),
        (None, None) => Decision::Claim,
    }
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

    fn seen<'a>(recorded: Option<(&'a str, &'a str)>, marker: Option<&'a str>, sampled: usize, present: usize) -> Seen<'a> {
        Seen { recorded, marker, here: HERE, index: "postgres://db:5432/x schema stowage", sampled, present }
    }

    fn refusal(s: Seen<'_>) -> String {
        match decide(&s) {
            Decision::Refuse(why) => why,
            other => panic!("want a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_matching_marker_is_enough_whatever_the_location_text() {
        // Another endpoint spelling of the same bucket: the marker is what proves it.
        assert_eq!(decide(&seen(Some(("id1", OTHER)), Some("id1"), 0, 0)), Decision::Matches);
    }

    #[test]
    fn a_fresh_store_is_claimed_and_an_upgraded_one_too_when_its_blobs_are_here() {
        assert_eq!(decide(&seen(None, None, 0, 0)), Decision::Claim);
        assert_eq!(decide(&seen(None, None, 8, 3)), Decision::Claim);
    }

    #[test]
    fn a_wrong_prefix_or_an_empty_bucket_is_refused_naming_both_locations() {
        let why = refusal(seen(Some(("id1", OTHER)), None, 8, 0));
        assert!(why.contains(HERE) && why.contains(OTHER) && why.contains("store id1"), "{why}");
        assert!(!why.contains('\n'));
        // Even when the wrong location happens to hold some of the same bytes.
        assert!(matches!(decide(&seen(Some(("id1", OTHER)), None, 8, 8)), Decision::Refuse(_)));
    }

    #[test]
    fn another_stores_marker_is_refused() {
        let why = refusal(seen(Some(("id1", OTHER)), Some("id2"), 0, 0));
        assert!(why.contains("store id2") && why.contains("store id1"), "{why}");
        let why = refusal(seen(None, Some("id2"), 0, 0));
        assert!(why.contains("records no store") && why.contains("another [store] prefix"), "{why}");
    }

    #[test]
    fn a_lost_marker_is_restored_only_where_the_blobs_are() {
        assert_eq!(decide(&seen(Some(("id1", HERE)), None, 8, 1)), Decision::RestoreMarker);
        assert_eq!(decide(&seen(Some(("id1", HERE)), None, 0, 0)), Decision::RestoreMarker);
        let why = refusal(seen(Some(("id1", HERE)), None, 8, 0));
        assert!(why.contains("emptied or replaced"), "{why}");
    }

    #[test]
    fn an_upgraded_index_whose_blobs_are_not_here_is_refused() {
        let why = refusal(seen(None, None, 8, 0));
        assert!(why.contains("none of the 8 newest records' blobs") && why.contains(HERE), "{why}");
    }

    #[test]
    fn locations_are_described_with_their_endpoint() {
        assert_eq!(describe_location("s3", "b", "", None), "s3://b");
        assert_eq!(describe_location("az", "c", "p/q", Some("http://h:1/acct/")), "az://c/p/q at http://h:1/acct");
    }
}
