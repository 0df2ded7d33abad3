//! Reading a step's `limits:` (`{ memory: 512MiB, pids: 256, cpu: 1.5, workspace: 1GiB,
//! log: 10MiB }`) into [`StepLimits`], each field's problem said in words that name the fix.

use overture_events::StepLimits;
use serde::Deserialize;

/// A step's `limits:` as written; every field is optional and falls back to its default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[serde(default)]
    memory: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    pids: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    cpu: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    workspace: Option<serde_yaml_ng::Value>,
    #[serde(default)]
    log: Option<serde_yaml_ng::Value>,
}

/// The least memory a step may be given: below it even a shell fails in confusing ways.
pub const MIN_MEMORY: u64 = 16 * 1024 * 1024;
/// The fewest processes a step may be given: a shell and a pipeline.
pub const MIN_PIDS: u32 = 8;
/// The least CPU a step may be given, in thousandths.
pub const MIN_CPU_MILLIS: u32 = 10;
/// The most CPUs a limit may name; more says nothing on any machine this runs on.
pub const MAX_CPUS: u32 = 1024;
/// The smallest workspace: the step's inputs must fit.
pub const MIN_WORKSPACE: u64 = 1024 * 1024;
/// The smallest log that still shows a head and a tail worth reading.
pub const MIN_LOG: u64 = 4 * 1024;

/// The limits `raw` sets over the defaults, or each problem as (field under `limits`, text).
pub fn effective(raw: Option<&RawLimits>) -> Result<StepLimits, Vec<(&'static str, String)>> {
    let mut limits = StepLimits::default();
    let Some(raw) = raw else {
        return Ok(limits);
    };
    let mut problems = Vec::new();
    if let Some(value) = &raw.memory {
        match size(value, MIN_MEMORY) {
            Ok(bytes) => limits.memory_bytes = bytes,
            Err(problem) => problems.push(("memory", problem)),
        }
    }
    if let Some(value) = &raw.workspace {
        match size(value, MIN_WORKSPACE) {
            Ok(bytes) => limits.workspace_bytes = bytes,
            Err(problem) => problems.push(("workspace", problem)),
        }
    }
    if let Some(value) = &raw.log {
        match size(value, MIN_LOG) {
            Ok(bytes) => limits.log_bytes = bytes,
            Err(problem) => problems.push(("log", problem)),
        }
    }
    if let Some(value) = &raw.pids {
        match pids(value) {
            Ok(pids) => limits.pids = pids,
            Err(problem) => problems.push(("pids", problem)),
        }
    }
    if let Some(value) = &raw.cpu {
        match cpu(value) {
            Ok(millis) => limits.cpu_millis = millis,
            Err(problem) => problems.push(("cpu", problem)),
        }
    }
    if problems.is_empty() {
        Ok(limits)
    } else {
        Err(problems)
    }
}

/// A YAML scalar as text: sizes and CPUs may be written as numbers or strings.
fn scalar(value: &serde_yaml_ng::Value) -> Option<String> {
    match value {
        serde_yaml_ng::Value::String(text) => Some(text.trim().to_owned()),
        serde_yaml_ng::Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// Reads a size such as `512MiB`, `1 GiB`, `1.5G`, `100MB` or `65536` (bytes).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "K" | "KiB" | "k" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || fraction.contains('.') || (number.contains('.') && fraction.is_empty()) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let mut bytes = whole.checked_mul(unit)?;
    // Fractions only to the byte: `1.5GiB` is exact, `0.3B` is not a size.
    if !fraction.is_empty() {
        if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits = u128::from(fraction.parse::<u64>().ok()?);
        let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?);
        let part = digits * u128::from(unit);
        if part % scale != 0 {
            return None;
        }
        bytes = bytes.checked_add(u64::try_from(part / scale).ok()?)?;
    }
    Some(bytes)
}

fn size(value: &serde_yaml_ng::Value, minimum: u64) -> Result<u64, String> {
    let bytes = scalar(value).as_deref().and_then(parse_size).ok_or_else(|| {
        "not a size; write a number with a unit, like 512MiB or 1GiB (KiB, MiB, GiB, TiB; or kB, MB, GB)".to_owned()
    })?;
    if bytes < minimum {
        return Err(format!(
            "{} is too small; give at least {}",
            overture_events::limits::Bytes(bytes),
            overture_events::limits::Bytes(minimum)
        ));
    }
    Ok(bytes)
}

fn pids(value: &serde_yaml_ng::Value) -> Result<u32, String> {
    let count = scalar(value)
        .and_then(|text| text.parse::<u32>().ok())
        .ok_or_else(|| "not a number of processes; write a whole number, like 256".to_owned())?;
    if count < MIN_PIDS {
        return Err(format!("{count} is too few; give at least {MIN_PIDS}"));
    }
    Ok(count)
}

fn cpu(value: &serde_yaml_ng::Value) -> Result<u32, String> {
    let bad = || "not a number of CPUs; write one like 1, 1.5 or 0.25".to_owned();
    let text = scalar(value).ok_or_else(bad)?;
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 3
    {
        return Err(bad());
    }
    let whole: u32 = whole.parse().map_err(|_| bad())?;
    if whole > MAX_CPUS {
        return Err(format!("{text} is more than {MAX_CPUS} CPUs; give fewer"));
    }
    let fraction: u32 = format!("{fraction:0<3}").parse().map_err(|_| bad())?;
    let millis = whole * 1000 + fraction;
    if millis < MIN_CPU_MILLIS {
        return Err(format!("{text} is too little; give at least 0.01"));
    }
    Ok(millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(yaml: &str) -> RawLimits {
        serde_yaml_ng::from_str(yaml).expect("yaml")
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("1 GiB"), Some(1 << 30));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("100MB"), Some(100_000_000));
        assert_eq!(parse_size("65536"), Some(65536));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        for bad in [
            "",
            "GiB",
            "1.GiB",
            "1..5G",
            "-1G",
            "1 parsec",
            "0.3B",
            "99999999999T",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_step_without_limits_gets_the_defaults() {
        assert_eq!(effective(None), Ok(StepLimits::default()));
        assert_eq!(effective(Some(&raw("{}"))), Ok(StepLimits::default()));
    }

    #[test]
    fn given_limits_replace_the_defaults_one_by_one() {
        let limits = effective(Some(&raw(
            "{ memory: 512MiB, pids: 256, cpu: 1.5, workspace: 1GiB, log: 10MiB }",
        )))
        .expect("valid");
        assert_eq!(
            limits,
            StepLimits {
                memory_bytes: 512 << 20,
                pids: 256,
                cpu_millis: 1500,
                workspace_bytes: 1 << 30,
                log_bytes: 10 << 20,
            }
        );
        let only_cpu = effective(Some(&raw("{ cpu: '0.25' }"))).expect("valid");
        assert_eq!(only_cpu.cpu_millis, 250);
        assert_eq!(only_cpu.memory_bytes, StepLimits::DEFAULT_MEMORY);
    }

    #[test]
    fn every_bad_field_is_named_with_its_fix() {
        let problems = effective(Some(&raw(
            "{ memory: lots, pids: 2, cpu: -1, workspace: 1KiB, log: [1] }",
        )))
        .expect_err("invalid");
        let fields: Vec<&str> = problems.iter().map(|(field, _)| *field).collect();
        assert_eq!(fields, ["memory", "workspace", "log", "pids", "cpu"]);
        assert!(problems[0].1.contains("like 512MiB"), "{:?}", problems[0]);
        assert_eq!(problems[1].1, "1 KiB is too small; give at least 1 MiB");
        assert_eq!(problems[3].1, "2 is too few; give at least 8");
        assert!(problems[4].1.contains("like 1, 1.5"), "{:?}", problems[4]);
        assert!(effective(Some(&raw("{ cpu: 0 }"))).is_err());
        assert!(effective(Some(&raw("{ cpu: 1.2345 }"))).is_err());
    }
}
