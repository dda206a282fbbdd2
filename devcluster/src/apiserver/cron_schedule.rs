//! CronJob `spec.schedule` parsing as kube-apiserver's validation does it (robfig/cron v3's standard
//! parser behind `ParseCronScheduleWithPanicRecovery`), reporting the same error texts: five fields or
//! an `@` descriptor, an optional leading `TZ=`/`CRON_TZ=` location.

/// Bounds and names of one schedule field.
struct Bounds {
    min: u64,
    max: u64,
    names: &'static [(&'static str, u64)],
}

const MINUTES: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        ("jan", 1),
        ("feb", 2),
        ("mar", 3),
        ("apr", 4),
        ("may", 5),
        ("jun", 6),
        ("jul", 7),
        ("aug", 8),
        ("sep", 9),
        ("oct", 10),
        ("nov", 11),
        ("dec", 12),
    ],
};
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &[
        ("sun", 0),
        ("mon", 1),
        ("tue", 2),
        ("wed", 3),
        ("thu", 4),
        ("fri", 5),
        ("sat", 6),
    ],
};

/// Checks `spec` as upstream's `cron.ParseStandard` does; `is_time_zone` says whether a `TZ=`
/// location names a known IANA zone.
///
/// # Errors
/// The parser's message, e.g. `expected exactly 5 fields, found 3: [* * *]`.
pub fn parse_standard(spec: &str, is_time_zone: impl Fn(&str) -> bool) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        // Upstream slices up to the first space; without one Go panics, and the panic is
        // recovered into this message.
        let Some(space) = spec.find(' ') else {
            return Err(
                "invalid schedule format: runtime error: slice bounds out of range [:-1]".into(),
            );
        };
        let eq = spec.find('=').unwrap_or(0);
        let location = spec.get(eq + 1..space).unwrap_or("");
        if !is_time_zone(location) {
            return Err(format!(
                "provided bad location {location}: unknown time zone {location}"
            ));
        }
        spec = spec[space..].trim();
    }
    if spec.starts_with('@') {
        return descriptor(spec);
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    let bounds = [&MINUTES, &HOURS, &DAYS_OF_MONTH, &MONTHS, &DAYS_OF_WEEK];
    for (field, bounds) in fields.iter().zip(bounds) {
        for expr in field.split(',').filter(|e| !e.is_empty()) {
            range(expr, bounds)?;
        }
    }
    Ok(())
}

fn descriptor(spec: &str) -> Result<(), String> {
    match spec {
        "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => {
            Ok(())
        }
        _ => match spec.strip_prefix("@every ") {
            Some(duration) => {
                go_duration(duration).map_err(|e| format!("failed to parse duration {spec}: {e}"))
            }
            None => Err(format!("unrecognized descriptor: {spec}")),
        },
    }
}

/// One comma-separated part of a field: `*`, `?`, `N`, `N-M`, each optionally `/step`.
fn range(expr: &str, bounds: &Bounds) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let (start, mut end) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (bounds.min, bounds.max)
    } else {
        let start = int_or_name(low_and_high[0], bounds)?;
        match low_and_high.len() {
            1 => (start, start),
            2 => (start, int_or_name(low_and_high[1], bounds)?),
            _ => return Err(format!("too many hyphens: {expr}")),
        }
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = non_negative_int(range_and_step[1])?;
            // "N/step" means "N-max/step".
            if low_and_high.len() == 1 {
                end = bounds.max;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({}): {expr}",
            bounds.min
        ));
    }
    if end > bounds.max {
        return Err(format!(
            "end of range ({end}) above maximum ({}): {expr}",
            bounds.max
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

fn int_or_name(expr: &str, bounds: &Bounds) -> Result<u64, String> {
    let lower = expr.to_lowercase();
    match bounds.names.iter().find(|(name, _)| *name == lower) {
        Some((_, value)) => Ok(*value),
        None => non_negative_int(expr),
    }
}

/// Go's `strconv.Atoi` plus robfig's refusal of negative numbers, with their messages.
fn non_negative_int(expr: &str) -> Result<u64, String> {
    let quoted = serde_json::to_string(expr).unwrap_or_default();
    let digits = expr.strip_prefix(['+', '-']).unwrap_or(expr);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {quoted}: invalid syntax"
        ));
    }
    let Ok(number) = expr.parse::<i64>() else {
        return Err(format!(
            "failed to parse int from {expr}: strconv.Atoi: parsing {quoted}: value out of range"
        ));
    };
    u64::try_from(number).map_err(|_| format!("negative number ({number}) not allowed: {expr}"))
}

/// Go's `time.ParseDuration` acceptance, with its error texts (the value itself is not needed).
fn go_duration(s: &str) -> Result<(), String> {
    let quoted = serde_json::to_string(s).unwrap_or_default();
    let invalid = || format!("time: invalid duration {quoted}");
    let mut rest = s.strip_prefix(['+', '-']).unwrap_or(s);
    if rest == "0" {
        return Ok(());
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let mut digits = int_len;
        rest = &rest[int_len..];
        if let Some(after_dot) = rest.strip_prefix('.') {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            digits += frac_len;
            rest = &after_dot[frac_len..];
        } else if int_len == 0 {
            return Err(invalid());
        }
        if digits == 0 {
            return Err(invalid());
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        if unit.is_empty() {
            return Err(format!("time: missing unit in duration {quoted}"));
        }
        if !matches!(unit, "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h") {
            let unit = serde_json::to_string(unit).unwrap_or_default();
            return Err(format!("time: unknown unit {unit} in duration {quoted}"));
        }
        rest = &rest[unit_len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(spec: &str) -> Result<(), String> {
        parse_standard(spec, |tz| tz == "UTC" || tz == "Europe/Paris")
    }

    #[test]
    fn five_field_schedules_and_descriptors_parse() {
        for ok in [
            "*/5 * * * *",
            "0 0 1 jan,JUL mon-fri",
            "15 3 * * ?",
            "0-59/15 0-23 1-31 1-12 0-6",
            "@hourly",
            "@every 1h30m",
            "TZ=UTC 0 * * * *",
        ] {
            assert_eq!(parse(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn the_field_count_is_reported_with_the_fields() {
        assert_eq!(
            parse("* * *"),
            Err("expected exactly 5 fields, found 3: [* * *]".into())
        );
        assert_eq!(
            parse("0 * * * * *"),
            Err("expected exactly 5 fields, found 6: [0 * * * * *]".into())
        );
    }

    #[test]
    fn out_of_range_and_malformed_values_get_robfigs_messages() {
        assert_eq!(
            parse("60 * * * *"),
            Err("end of range (60) above maximum (59): 60".into())
        );
        assert_eq!(
            parse("* * 0 * *"),
            Err("beginning of range (0) below minimum (1): 0".into())
        );
        assert_eq!(
            parse("* * * * 7"),
            Err("end of range (7) above maximum (6): 7".into())
        );
        assert_eq!(
            parse("5-2 * * * *"),
            Err("beginning of range (5) beyond end of range (2): 5-2".into())
        );
        assert_eq!(
            parse("*/0 * * * *"),
            Err("step of range should be a positive number: */0".into())
        );
        assert_eq!(
            parse("x * * * *"),
            Err("failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax".into())
        );
        assert_eq!(
            parse("1-2-3 * * * *"),
            Err("too many hyphens: 1-2-3".into())
        );
    }

    #[test]
    fn descriptors_and_locations_are_checked() {
        assert_eq!(
            parse("@fortnightly"),
            Err("unrecognized descriptor: @fortnightly".into())
        );
        assert_eq!(
            parse("@every 1x"),
            Err(
                "failed to parse duration @every 1x: time: unknown unit \"x\" in duration \"1x\""
                    .into()
            )
        );
        assert_eq!(
            parse("CRON_TZ=Mars/Base * * * * *"),
            Err("provided bad location Mars/Base: unknown time zone Mars/Base".into())
        );
    }
}
