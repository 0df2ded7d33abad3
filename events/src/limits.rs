//! [`StepLimits`]: what one attempt of a step may use of the machine, as the blueprint's
//! `limits:` set them or the defaults fill them in, recorded with the step's spec so the audit
//! trail says what every attempt was allowed.

use std::fmt;

use serde::{Deserialize, Serialize};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// What one attempt of a step may use: memory, processes, CPU, workspace and log size.
///
/// Missing fields read as their defaults, so a spec recorded before limits existed reads as a
/// step with the default limits, which is what its attempts now get.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepLimits {
    /// Memory of all the attempt's processes together, the files of its `/tmp` included.
    pub memory_bytes: u64,
    /// Processes and threads at once.
    pub pids: u32,
    /// CPU time in thousandths of a CPU: 1500 is one and a half CPUs.
    pub cpu_millis: u32,
    /// The size of the attempt's `/work`.
    pub workspace_bytes: u64,
    /// The most of the attempt's output its log keeps, head and tail together.
    pub log_bytes: u64,
}

impl StepLimits {
    /// Memory unless the step says: enough for Terraform or Ansible with a handful of forks.
    pub const DEFAULT_MEMORY: u64 = 2 * GIB;
    /// Processes unless the step says: far above what Ansible's forks need, far below a fork
    /// bomb's thousands.
    pub const DEFAULT_PIDS: u32 = 512;
    /// CPU unless the step says: two CPUs.
    pub const DEFAULT_CPU_MILLIS: u32 = 2000;
    /// Workspace unless the step says.
    pub const DEFAULT_WORKSPACE: u64 = GIB;
    /// Log unless the step says.
    pub const DEFAULT_LOG: u64 = 10 * MIB;
}

impl Default for StepLimits {
    fn default() -> Self {
        Self {
            memory_bytes: Self::DEFAULT_MEMORY,
            pids: Self::DEFAULT_PIDS,
            cpu_millis: Self::DEFAULT_CPU_MILLIS,
            workspace_bytes: Self::DEFAULT_WORKSPACE,
            log_bytes: Self::DEFAULT_LOG,
        }
    }
}

/// A number of bytes as people write it: `1 GiB`, `512 MiB`, `1.5 KiB`, `1000 bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        for (unit, name) in [(GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
            if bytes >= unit {
                // Tenths are enough to recognise a limit; exact multiples print without them.
                let tenths = (u128::from(bytes) * 10 + u128::from(unit) / 2) / u128::from(unit);
                return if tenths % 10 == 0 {
                    write!(f, "{} {name}", tenths / 10)
                } else {
                    write!(f, "{}.{} {name}", tenths / 10, tenths % 10)
                };
            }
        }
        write!(f, "{bytes} bytes")
    }
}

/// A CPU share as the blueprint writes it: `1.5` for 1500 thousandths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpus(pub u32);

impl fmt::Display for Cpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / 1000;
        let rest = self.0 % 1000;
        if rest == 0 {
            write!(f, "{whole}")
        } else {
            let digits = format!("{rest:03}");
            write!(f, "{whole}.{}", digits.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(Bytes(GIB).to_string(), "1 GiB");
        assert_eq!(Bytes(512 * MIB).to_string(), "512 MiB");
        assert_eq!(Bytes(3 * GIB / 2).to_string(), "1.5 GiB");
        assert_eq!(Bytes(1000).to_string(), "1000 bytes");
        assert_eq!(Cpus(1500).to_string(), "1.5");
        assert_eq!(Cpus(2000).to_string(), "2");
        assert_eq!(Cpus(250).to_string(), "0.25");
    }

    #[test]
    fn a_spec_without_limits_reads_as_the_defaults() {
        let limits: StepLimits = serde_json::from_str("{}").expect("reads");
        assert_eq!(limits, StepLimits::default());
        let limits: StepLimits = serde_json::from_str(r#"{"pids":64}"#).expect("reads");
        assert_eq!(limits.pids, 64);
        assert_eq!(limits.memory_bytes, StepLimits::DEFAULT_MEMORY);
    }
}
