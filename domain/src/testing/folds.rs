//! The read models folded both ways a projector folds them: the whole event, and the lean
//! decode a rebuild reads from the log's text; tests check the two agree.

use overture_events::{DeploymentEvent, DeploymentId, Envelope};

use crate::projection::{Change, Folding, ReadModels, Touched};

/// The views folded from the whole events and from the lean decode, side by side.
#[derive(Debug, Default)]
pub struct BothWays {
    /// The views as [`ReadModels::apply`] folds each whole event.
    pub whole: ReadModels,
    /// The views as a rebuild folds them from [`Change::decode`].
    pub lean: ReadModels,
    /// What the lean folds touched.
    pub touched: Touched,
}

impl BothWays {
    /// Folds one record both ways; fails the test when the lean decode is not the whole event's
    /// change, or either fold refuses it.
    #[track_caller]
    pub fn fold(&mut self, record: &Envelope) {
        let decoded = Change::decode(&record.event_type, &record.data.to_string())
            .expect("decodes only what the views need");
        let event =
            DeploymentEvent::from_parts(&record.event_type, record.data.clone()).expect("decodes");
        assert_eq!(decoded, Change::from(event), "{}", record.event_type);
        self.whole.apply(record).expect("folds");
        self.lean.apply_change(
            Folding {
                deployment: DeploymentId::from_stream(&record.stream).expect("a stream"),
                revision: record.revision,
                at: record.metadata.recorded_at,
                change: decoded,
            },
            &mut self.touched,
        );
    }
}
