//! The hash chain that makes each stream tamper-evident, and the check of it.
//!
//! Each event's **content hash** is the SHA-256 of its envelope in canonical form, without its
//! two chain fields: the JSON object `{stream, revision, id, type, data, metadata}` as
//! `overture events --json` prints it, with `metadata.previous` and `metadata.hash` removed,
//! written with every object's keys sorted (by Unicode code point) and no whitespace, strings
//! escaped as JSON requires and nothing more (non-ASCII characters as they are, in UTF-8), and
//! numbers as they were parsed. In Python:
//!
//! ```text
//! body = dict(event); body.pop("position", None); meta = dict(body["metadata"])
//! previous = meta.pop("previous"); stored = meta.pop("hash"); body["metadata"] = meta
//! text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
//! content = hashlib.sha256(text.encode()).digest()
//! assert hashlib.sha256(bytes.fromhex(previous) + content).hexdigest() == stored
//! ```
//!
//! Its **link** (`metadata.hash`) is SHA-256 of the previous event's link (32 bytes; 32 zero
//! bytes before a stream's first event) followed by its content hash (32 bytes), and
//! `metadata.previous` repeats the previous event's link, both in lowercase hex. Changing any
//! field of a recorded event changes its content hash, so its link no longer matches; removing,
//! inserting or reordering an event breaks the `previous` of the one after it. A stream's last
//! link (its **head**) stands for the whole stream.
//!
//! Events recorded before the log was chained carry neither field ("unsealed"). A stream may
//! begin with unsealed events; their links are computed as if they had been stored, so the first
//! sealed event after them attests them. An unsealed event after a sealed one is a break.

use sha2::{Digest, Sha256};

use crate::Envelope;

/// The `previous` of a stream's first event: 32 zero bytes, in hex.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The envelope in canonical form, without its chain fields: the text its content hash is of.
pub fn canonical(envelope: &Envelope) -> Vec<u8> {
    let mut value = serde_json::json!({
        "stream": envelope.stream,
        "revision": envelope.revision,
        "id": envelope.id,
        "type": envelope.event_type,
        "data": envelope.data,
        "metadata": envelope.metadata,
    });
    if let Some(metadata) = value
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        metadata.remove("previous");
        metadata.remove("hash");
    }
    let mut out = Vec::with_capacity(256);
    write_canonical(&value, &mut out);
    out
}

/// Any JSON value in the canonical form above: keys sorted, no whitespace.
pub fn canonical_json(value: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut Vec<u8>) {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            // UTF-8 byte order is code point order, as Python's `sort_keys` sorts.
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_scalar(&serde_json::Value::String(key.clone()), out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
        serde_json::Value::Array(items) => {
            out.push(b'[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &serde_json::Value, out: &mut Vec<u8>) {
    // Writing a string, number, boolean or null into a Vec cannot fail.
    let _ = serde_json::to_writer(out, value);
}

/// SHA-256 of the envelope's canonical form.
pub fn content_hash(envelope: &Envelope) -> [u8; 32] {
    Sha256::digest(canonical(envelope)).into()
}

/// The link after `previous` (hex) of an event with this content hash, in hex; `None` when
/// `previous` is not 64 hex digits.
pub fn link(previous: &str, content: &[u8; 32]) -> Option<String> {
    let previous = decode(previous)?;
    let mut hasher = Sha256::new();
    hasher.update(previous);
    hasher.update(content);
    Some(hex::encode(hasher.finalize()))
}

fn decode(text: &str) -> Option<[u8; 32]> {
    let mut bytes = [0u8; 32];
    hex::decode_to_slice(text, &mut bytes).ok()?;
    Some(bytes)
}

/// Records the envelope as following `previous` (the stream's head, [`GENESIS`] before its
/// first event): sets its `previous` and `hash`, and returns the new head.
pub fn seal(envelope: &mut Envelope, previous: &str) -> String {
    let content = content_hash(envelope);
    // A head this module computed is always 64 hex digits; anything else restarts the chain
    // from a value that cannot match, so the check below reports it.
    let hash = link(previous, &content).unwrap_or_default();
    envelope.metadata.previous = Some(previous.to_owned());
    envelope.metadata.hash = Some(hash.clone());
    hash
}

/// How a stream's chain is broken at one event.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Break {
    /// The event's content no longer hashes to the link recorded with it.
    #[error("its content was changed after it was recorded (its hash does not match it)")]
    ContentChanged,
    /// The event's `previous` is not the link of the event before it: one was removed,
    /// inserted or moved.
    #[error(
        "its link does not follow the event before it (it names previous {found}, the stream's \
         head is {expected}): an event was removed, inserted or moved"
    )]
    DoesNotFollow {
        /// The head of the stream before this event.
        expected: String,
        /// The `previous` the event records.
        found: String,
    },
    /// The event's revision is not the next of its stream.
    #[error(
        "revision {found} where revision {expected} comes next: an event is missing or repeated"
    )]
    RevisionGap {
        /// The revision that comes next.
        expected: u64,
        /// The event's revision.
        found: u64,
    },
    /// The event carries no chain fields (or one of the two) after an event that carried both.
    #[error("it carries no hash although an event before it in its stream does")]
    Unsealed,
}

/// A stream's chain checked one event at a time, in revision order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainCheck {
    /// The revision that comes next.
    pub next_revision: u64,
    /// The link of the last event checked ([`GENESIS`] before the first).
    pub head: String,
    /// How many events checked carried their chain fields.
    pub sealed: u64,
    /// How many carried none (recorded before the log was chained).
    pub unsealed: u64,
}

impl Default for ChainCheck {
    fn default() -> Self {
        Self::after(0, GENESIS.to_owned())
    }
}

impl ChainCheck {
    /// A check that starts after an event already checked: the next `revision`, after `head`.
    pub fn after(next_revision: u64, head: String) -> Self {
        Self {
            next_revision,
            head,
            sealed: 0,
            unsealed: 0,
        }
    }

    /// Checks the stream's next event; on success it becomes the head.
    pub fn check(&mut self, envelope: &Envelope) -> Result<(), Break> {
        if envelope.revision != self.next_revision {
            return Err(Break::RevisionGap {
                expected: self.next_revision,
                found: envelope.revision,
            });
        }
        let content = content_hash(envelope);
        let metadata = &envelope.metadata;
        let next = match (&metadata.previous, &metadata.hash) {
            (None, None) if self.sealed == 0 => {
                self.unsealed += 1;
                link(&self.head, &content).unwrap_or_default()
            }
            (Some(previous), Some(hash)) => {
                if *previous != self.head {
                    return Err(Break::DoesNotFollow {
                        expected: self.head.clone(),
                        found: previous.clone(),
                    });
                }
                if link(previous, &content).as_ref() != Some(hash) {
                    return Err(Break::ContentChanged);
                }
                self.sealed += 1;
                hash.clone()
            }
            _ => return Err(Break::Unsealed),
        };
        self.head = next;
        self.next_revision += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Metadata;
    use uuid::Uuid;

    fn event(revision: u64, data: serde_json::Value) -> Envelope {
        Envelope {
            stream: "deployment-0190d9e4-0000-7000-8000-000000000001".into(),
            revision,
            id: Uuid::from_u128(u128::from(revision) + 10),
            event_type: "StepSucceeded".into(),
            data,
            metadata: Metadata {
                tenant: "acme".into(),
                actor: "ada".into(),
                correlation_id: Uuid::from_u128(1),
                causation_id: Uuid::from_u128(2),
                recorded_at: chrono::DateTime::UNIX_EPOCH,
                previous: None,
                hash: None,
            },
        }
    }

    fn sealed_stream(count: u64) -> Vec<Envelope> {
        let mut head = GENESIS.to_owned();
        (0..count)
            .map(|revision| {
                let mut e = event(revision, serde_json::json!({"outputs": {"ip": "10.0.0.1"}}));
                head = seal(&mut e, &head);
                e
            })
            .collect()
    }

    fn check_all(events: &[Envelope]) -> Result<ChainCheck, (u64, Break)> {
        let mut check = ChainCheck::default();
        for e in events {
            check.check(e).map_err(|b| (e.revision, b))?;
        }
        Ok(check)
    }

    #[test]
    fn the_canonical_form_sorts_keys_drops_the_chain_and_has_no_whitespace() {
        let mut e = event(0, serde_json::json!({"z": 1, "a": ["é", "\n"]}));
        e.metadata.previous = Some(GENESIS.into());
        e.metadata.hash = Some("ff".into());
        let text = String::from_utf8(canonical(&e)).expect("UTF-8");
        assert_eq!(
            text,
            "{\"data\":{\"a\":[\"é\",\"\\n\"],\"z\":1},\"id\":\"00000000-0000-0000-0000-00000000000a\",\
             \"metadata\":{\"$causationId\":\"00000000-0000-0000-0000-000000000002\",\
             \"$correlationId\":\"00000000-0000-0000-0000-000000000001\",\"actor\":\"ada\",\
             \"recorded_at\":\"1970-01-01T00:00:00Z\",\"tenant\":\"acme\"},\"revision\":0,\
             \"stream\":\"deployment-0190d9e4-0000-7000-8000-000000000001\",\"type\":\"StepSucceeded\"}"
        );
    }

    #[test]
    fn a_sealed_stream_verifies_and_its_head_is_its_last_link() {
        let events = sealed_stream(3);
        let check = check_all(&events).expect("verifies");
        assert_eq!(check.head, events[2].metadata.hash.clone().expect("hash"));
        assert_eq!(
            (check.sealed, check.unsealed, check.next_revision),
            (3, 0, 3)
        );
        assert_eq!(events[0].metadata.previous.as_deref(), Some(GENESIS));
    }

    #[test]
    fn a_changed_output_is_content_changed_at_its_event() {
        let mut events = sealed_stream(3);
        events[1].data = serde_json::json!({"outputs": {"ip": "10.6.6.6"}});
        assert_eq!(check_all(&events).err(), Some((1, Break::ContentChanged)));
    }

    #[test]
    fn a_changed_tenant_is_content_changed() {
        let mut events = sealed_stream(2);
        events[0].metadata.tenant = "mallory".into();
        assert_eq!(check_all(&events).err(), Some((0, Break::ContentChanged)));
    }

    #[test]
    fn a_removed_event_is_a_revision_gap_and_a_renumbered_one_does_not_follow() {
        let mut events = sealed_stream(3);
        events.remove(1);
        assert!(matches!(
            check_all(&events).err(),
            Some((
                2,
                Break::RevisionGap {
                    expected: 1,
                    found: 2
                }
            ))
        ));
        // Renumbered to hide the gap: it names the removed event as its previous.
        events[1].revision = 1;
        assert!(matches!(
            check_all(&events).err(),
            Some((1, Break::DoesNotFollow { .. }))
        ));
    }

    #[test]
    fn a_resealed_event_does_not_follow_when_its_successor_is_kept() {
        let mut events = sealed_stream(3);
        events[1].data = serde_json::json!({"outputs": {"ip": "10.6.6.6"}});
        let previous = events[1].metadata.previous.clone().expect("previous");
        seal(&mut events[1], &previous);
        assert!(matches!(
            check_all(&events).err(),
            Some((2, Break::DoesNotFollow { .. }))
        ));
    }

    #[test]
    fn unsealed_events_may_open_a_stream_and_the_first_sealed_one_attests_them() {
        let mut events = vec![
            event(0, serde_json::json!({})),
            event(1, serde_json::json!({})),
        ];
        let mut head = GENESIS.to_owned();
        for e in &events {
            head = link(&head, &content_hash(e)).expect("hex");
        }
        let mut next = event(2, serde_json::json!({}));
        seal(&mut next, &head);
        events.push(next);
        let check = check_all(&events).expect("verifies");
        assert_eq!((check.sealed, check.unsealed), (1, 2));

        // The attested prefix cannot be changed either.
        events[0].metadata.actor = "mallory".into();
        assert!(matches!(
            check_all(&events).err(),
            Some((2, Break::DoesNotFollow { .. }))
        ));
    }

    #[test]
    fn an_event_stripped_of_its_chain_after_a_sealed_one_is_a_break() {
        let mut events = sealed_stream(2);
        events[1].metadata.previous = None;
        events[1].metadata.hash = None;
        assert_eq!(check_all(&events).err(), Some((1, Break::Unsealed)));
    }
}
