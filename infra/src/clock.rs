//! The system clock behind the [`Clock`] port.

use overture_events::Timestamp;
use overture_kit::Clock;

/// Reads the machine's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}
