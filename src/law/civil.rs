//! Unix time as a UTC calendar date and time, for the timestamps the warden
//! writes itself (Ollama's RFC 3339 stamps, the bench's report names):
//! Howard Hinnant's `civil_from_days`, exact for every date the proleptic
//! Gregorian calendar has, with no time-zone database.

/// A UTC moment, to the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year.
    pub year: i64,
    /// 1 to 12.
    pub month: i64,
    /// 1 to 31.
    pub day: i64,
    /// 0 to 23.
    pub hour: i64,
    /// 0 to 59.
    pub minute: i64,
    /// 0 to 59.
    pub second: i64,
}

/// `unix_secs` (seconds since 1970-01-01T00:00:00Z) as a UTC date and time.
pub fn civil(unix_secs: i64) -> Civil {
    let (days, rem) = (unix_secs.div_euclid(86_400), unix_secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    Civil {
        year: yoe + era * 400 + i64::from(month <= 2),
        month,
        day,
        hour: rem / 3600,
        minute: rem % 3600 / 60,
        second: rem % 60,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The epoch, a leap day, a century that is not a leap year, a day
    /// before the epoch, and the last second of a year.
    #[test]
    fn dates_across_the_calendar() {
        let rows = [
            (0, (1970, 1, 1, 0, 0, 0)),
            (951_782_400, (2000, 2, 29, 0, 0, 0)),
            (4_107_542_400, (2100, 3, 1, 0, 0, 0)),
            (-86_400, (1969, 12, 31, 0, 0, 0)),
            (1_735_689_599, (2024, 12, 31, 23, 59, 59)),
            (1_714_566_896, (2024, 5, 1, 12, 34, 56)),
        ];
        for (secs, (year, month, day, hour, minute, second)) in rows {
            let want = Civil { year, month, day, hour, minute, second };
            assert_eq!(civil(secs), want, "{secs}");
        }
    }
}
