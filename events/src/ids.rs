//! Deployment ids and stream names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The prefix of every deployment's stream name.
pub const STREAM_PREFIX: &str = "deployment-";

/// Identifies one deployment; a UUID v7, so ids sort by creation time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct DeploymentId(Uuid);

impl DeploymentId {
    /// Wraps an existing UUID.
    pub const fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    /// The UUID inside.
    pub const fn uuid(&self) -> Uuid {
        self.0
    }

    /// The name of this deployment's stream in the log: `deployment-<uuid>`.
    pub fn stream(&self) -> String {
        format!("{STREAM_PREFIX}{}", self.0)
    }

    /// Reads a deployment id back from a stream name.
    pub fn from_stream(stream: &str) -> Result<Self, ParseIdError> {
        stream
            .strip_prefix(STREAM_PREFIX)
            .ok_or_else(|| ParseIdError(stream.to_owned()))?
            .parse()
    }
}

impl From<DeploymentId> for Uuid {
    fn from(id: DeploymentId) -> Self {
        id.0
    }
}

impl fmt::Display for DeploymentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A text that is neither a deployment UUID nor a `deployment-<uuid>` stream name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a deployment id: expected a UUID such as 0192e4c5-6f1a-7c3e-9b1d-2f4a5b6c7d8e"
)]
pub struct ParseIdError(pub String);

impl FromStr for DeploymentId {
    type Err = ParseIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bare = text.strip_prefix(STREAM_PREFIX).unwrap_or(text);
        Uuid::parse_str(bare)
            .map(Self)
            .map_err(|_| ParseIdError(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_names_round_trip() {
        let id = DeploymentId::from_uuid(Uuid::from_u128(42));
        assert_eq!(DeploymentId::from_stream(&id.stream()), Ok(id));
        assert_eq!(id.stream().parse::<DeploymentId>(), Ok(id));
        assert!(DeploymentId::from_stream("tenant-x").is_err());
    }
}
